package agent

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Operation names.
const (
	OpPing       = "ping"
	OpStat       = "stat"
	OpRead       = "read"
	OpWrite      = "write"
	OpList       = "list"
	OpRemove     = "remove"
	OpRename     = "rename"
	OpMkdir      = "mkdir"
	OpSearch     = "search"
	OpExec       = "exec"
	OpProcStart  = "proc.start"
	OpProcList   = "proc.list"
	OpProcOutput = "proc.output"
	OpProcKill   = "proc.kill"
	OpTarOut     = "tar.out"
	OpTarIn      = "tar.in"
	OpCheck      = "check"
)

// Event names carried by event frames.
const (
	EventData   = "data"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventEOF    = "eof"
	// EventStarted precedes a command's (exec, proc.start, term.run) run; the client
	// consumes it.
	EventStarted = "started"
)

// File types in FileInfo.Type.
const (
	TypeFile    = "file"
	TypeDir     = "directory"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// PingResult describes the agent.
type PingResult struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"`
	UID      int    `json:"uid"`
	PID      int    `json:"pid"`
	// Landlock is the kernel's Landlock ABI version the agent enforces ExecPolicy
	// with; 0 means unavailable, and restricted commands run unenforced.
	Landlock int `json:"landlock"`
	// SameUID: the agent runs as the tool user (no uid of its own, no capability, as
	// in a Kubernetes pod); only Scoped keeps the tools from reaching it.
	SameUID bool `json:"sameUID,omitempty"`
	// Scoped: every process the agent starts for the tools is in a Landlock domain
	// scoped for signals and abstract unix sockets (Landlock ABI ≥ 6), so none can
	// signal, trace or read the agent. SameUID without Scoped is an agent the tools
	// can reach.
	Scoped bool `json:"scoped,omitempty"`
}

// FileInfo describes one file. Path is workspace-relative and slash-separated.
type FileInfo struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	MTime  time.Time `json:"mtime"`
	Target string    `json:"target,omitempty"` // a symlink's target, as written
}

// StatArgs asks for one path's FileInfo, following symlinks within the workspace.
type StatArgs struct {
	Path  string       `json:"path"`
	Guard *guard.Guard `json:"guard,omitempty"`
}

// ReadArgs reads a file, whole or a range. The content arrives as data events.
type ReadArgs struct {
	Path    string       `json:"path"`
	Offset  int64        `json:"offset,omitempty"`
	Length  int64        `json:"length,omitempty"`  // 0 reads to the end
	MaxSize int64        `json:"maxSize,omitempty"` // refuse files larger than this; 0 = no limit
	Hash    bool         `json:"hash,omitempty"`    // compute sha256 of what is read
	Guard   *guard.Guard `json:"guard,omitempty"`
}

// ReadResult follows the data events of a read.
type ReadResult struct {
	Info     FileInfo `json:"info"`
	N        int64    `json:"n"`                  // bytes sent
	SHA256   string   `json:"sha256,omitempty"`   // hex, when asked
	IsBinary bool     `json:"isBinary,omitempty"` // a NUL byte or invalid UTF-8 in the first 8 KiB
}

// WriteArgs writes the request body to a file.
type WriteArgs struct {
	Path    string       `json:"path"`
	Atomic  bool         `json:"atomic,omitempty"` // temp file in the same directory + rename
	Mkdirs  bool         `json:"mkdirs,omitempty"` // create missing parent directories
	Create  bool         `json:"create,omitempty"` // create the file if missing (else not_found)
	Mode    uint32       `json:"mode,omitempty"`   // for new files; 0 = 0644 (existing files keep theirs)
	MaxSize int64        `json:"maxSize,omitempty"`
	Guard   *guard.Guard `json:"guard,omitempty"`
}

// ListArgs lists a directory, optionally recursively and filtered by ** globs.
type ListArgs struct {
	Path       string       `json:"path"`
	Recursive  bool         `json:"recursive,omitempty"`
	Globs      []string     `json:"globs,omitempty"` // match workspace-relative paths; directories are still descended
	MaxEntries int          `json:"maxEntries,omitempty"`
	NoDirs     bool         `json:"noDirs,omitempty"` // list no directories (they are still descended)
	Guard      *guard.Guard `json:"guard,omitempty"`
}

// ListResult is a directory listing, sorted by path. A listing stops at MaxEntries, or
// earlier where more entries would not fit one answer (agent.MaxHeader): it is then
// Truncated, and Omitted counts the matching entries left out among the next
// MaxCounted it looks at (so there are at least that many).
type ListResult struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
	Omitted   int        `json:"omitted,omitempty"`
}

// MaxCounted bounds how many more entries a truncated listing looks at to count what it
// left out: the count costs a directory read per directory, never a stat.
const MaxCounted = 100000

// RemoveArgs removes a file, or a directory tree when Recursive.
type RemoveArgs struct {
	Path      string       `json:"path"`
	Recursive bool         `json:"recursive,omitempty"`
	Guard     *guard.Guard `json:"guard,omitempty"`
}

// RenameArgs moves From to To.
type RenameArgs struct {
	From      string       `json:"from"`
	To        string       `json:"to"`
	Overwrite bool         `json:"overwrite,omitempty"`
	Mkdirs    bool         `json:"mkdirs,omitempty"`
	Guard     *guard.Guard `json:"guard,omitempty"`
}

// MkdirArgs creates a directory (and its parents).
type MkdirArgs struct {
	Path  string       `json:"path"`
	Guard *guard.Guard `json:"guard,omitempty"`
}

// SearchArgs searches file contents.
type SearchArgs struct {
	Query         string       `json:"query"`
	Path          string       `json:"path,omitempty"` // subtree; "" or "." is the workspace
	Regex         bool         `json:"regex,omitempty"`
	CaseSensitive bool         `json:"caseSensitive,omitempty"`
	Globs         []string     `json:"globs,omitempty"`
	MaxResults    int          `json:"maxResults,omitempty"`
	MaxFileSize   int64        `json:"maxFileSize,omitempty"` // skip larger files; 0 = no limit
	NoIgnore      bool         `json:"noIgnore,omitempty"`    // don't honour .gitignore
	Hidden        bool         `json:"hidden,omitempty"`      // search dot-files too (.git is always skipped)
	MaxLineLen    int          `json:"maxLineLen,omitempty"`  // cut match lines to this many bytes; 0 = 500
	Guard         *guard.Guard `json:"guard,omitempty"`
}

// Match is one search hit. Line and Column are 1-based; Column counts UTF-8 characters.
type Match struct {
	Path   string `json:"path"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Text   string `json:"text"`
}

// SearchResult lists matches sorted by path, then line. A search stops at MaxResults,
// and an answer keeps no more matches than fit in it (agent.MaxHeader): it is then
// Truncated, and Omitted counts the matches found but left out (the search stopped
// early, so there may be more).
type SearchResult struct {
	Matches       []Match `json:"matches"`
	Truncated     bool    `json:"truncated,omitempty"`
	Omitted       int     `json:"omitted,omitempty"`
	FilesSearched int     `json:"filesSearched"`
}

// ExecArgs runs a command without a shell. The request body is its stdin.
type ExecArgs struct {
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd,omitempty"` // workspace-relative
	Env       map[string]string `json:"env,omitempty"` // added to the agent's fixed base environment
	TimeoutMS int64             `json:"timeoutMs,omitempty"`
	GraceMS   int64             `json:"graceMs,omitempty"`   // SIGTERM→SIGKILL; 0 = 2000
	OutputCap int64             `json:"outputCap,omitempty"` // per stream; 0 = 1 MiB
	Stream    bool              `json:"stream,omitempty"`    // send stdout/stderr events while running
	Guard     *guard.Guard      `json:"guard,omitempty"`
	Launch    *ExecPolicy       `json:"launch,omitempty"` // nil: the command may execute anything
}

// ExecPolicy is what a command and all its descendants may execute. The agent forks
// the command from a thread that it first restricts with Landlock so that only these
// files can be executed; the command inherits the restriction (package
// server/launch).
type ExecPolicy struct {
	// Programs are bare names, each looked up on SafePath (symlinks resolved). Each
	// match may be executed, and so may its ELF interpreter and its #! interpreters.
	// Empty: nothing but Dirs.
	Programs []string `json:"programs"`
	// Dirs are absolute trees whose files may all be executed (git's exec-path);
	// missing ones are skipped.
	Dirs []string `json:"dirs,omitempty"`
	// Require refuses the command (CodeNotEnforced) where Landlock is unavailable,
	// instead of running it unenforced.
	Require bool `json:"require,omitempty"`
}

// ExecResult is a finished command. A command that could not start has ExitCode -1 and StartError.
type ExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Stdout          []byte `json:"-"` // travels in the done frame's body
	Stderr          []byte `json:"-"`
	StdoutLen       int    `json:"stdoutLen"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	Canceled        bool   `json:"canceled,omitempty"`
	Signal          string `json:"signal,omitempty"`
	StartError      string `json:"startError,omitempty"`
	DurationMS      int64  `json:"durationMs"`
	// OOMKilled: the container's memory limit killed the command (the cgroup's OOM
	// killer struck while it ran); MemoryLimitBytes is that limit, 0 if unknown.
	OOMKilled        bool  `json:"oomKilled,omitempty"`
	MemoryLimitBytes int64 `json:"memoryLimitBytes,omitempty"`
	// Unenforced is set when the call had a Launch policy and Landlock was unavailable.
	Unenforced bool `json:"unenforced,omitempty"`
}

// ProcStartArgs starts a background process owned by the agent (it outlives the stream).
type ProcStartArgs struct {
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	OutputCap int64             `json:"outputCap,omitempty"` // ring buffer per stream; 0 = 1 MiB
	Guard     *guard.Guard      `json:"guard,omitempty"`
	Launch    *ExecPolicy       `json:"launch,omitempty"` // as in ExecArgs
}

// ProcInfo describes a background process.
type ProcInfo struct {
	ID        string     `json:"id"`
	Argv      []string   `json:"argv"`
	PID       int        `json:"pid"`
	Running   bool       `json:"running"`
	ExitCode  *int       `json:"exitCode,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// Unenforced: started with a Launch policy while Landlock was unavailable.
	Unenforced bool `json:"unenforced,omitempty"`
}

// ProcIDArgs names a background process.
type ProcIDArgs struct {
	ID string `json:"id"`
}

// ProcOutputArgs reads a background process's output from the given offsets.
type ProcOutputArgs struct {
	ID           string `json:"id"`
	StdoutOffset int64  `json:"stdoutOffset,omitempty"`
	StderrOffset int64  `json:"stderrOffset,omitempty"`
	WaitMS       int64  `json:"waitMs,omitempty"` // wait up to this long for new output or exit
}

// ProcOutput is the output since the offsets asked for, and the offsets to ask next.
type ProcOutput struct {
	Proc         ProcInfo `json:"proc"`
	Stdout       []byte   `json:"-"` // travels in the done frame's body
	Stderr       []byte   `json:"-"`
	StdoutLen    int      `json:"stdoutLen"`
	StdoutOffset int64    `json:"stdoutOffset"`
	StderrOffset int64    `json:"stderrOffset"`
	Dropped      bool     `json:"dropped,omitempty"` // output before the offsets was overwritten in the ring
}

// ProcKillArgs signals a background process's group: SIGTERM, then SIGKILL after the grace.
type ProcKillArgs struct {
	ID      string `json:"id"`
	GraceMS int64  `json:"graceMs,omitempty"`
}

// SafePath is the only PATH commands are resolved on and run with: never the workspace,
// never a caller's PATH.
const SafePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CheckArgs asks which of some workspace-relative paths the guard refuses to show: a
// denied name, a name whose symlink-resolved path is denied or leads out, or (where the
// guard denies anything) a regular file with more than one link. Paths that do not exist
// are judged by name alone. The host uses it to build git pathspec excludes.
type CheckArgs struct {
	Paths []string     `json:"paths"`
	Guard *guard.Guard `json:"guard,omitempty"`
}

// CheckResult lists the refused paths, as they were asked.
type CheckResult struct {
	Refused []string `json:"refused"`
}

// TarOutArgs streams a directory as a tar archive (data events). Guard-denied paths are
// left out; symlinks are archived as links.
//
// Exact asks for the whole tree as it is, for a snapshot, an archive or a fork that
// TarInArgs.Exact gives back: every symlink whatever its target, hard links as links,
// modes and mtimes, sparse files as their data (TarSparse), and files the workspace user
// can't read (read as their owner). FIFOs, sockets and devices are skipped and listed in
// a PAX global header (TarSkipped) at the end of the stream. What can't be read fails
// the whole stream, naming the path, as does a tree of more than MaxTarEntries entries.
type TarOutArgs struct {
	Path  string       `json:"path,omitempty"`
	Guard *guard.Guard `json:"guard,omitempty"`
	Exact bool         `json:"exact,omitempty"`
	// Refs (exact only): a regular file unchanged since this agent last sent it whole
	// (same inode, size, mtime and ctime, none of them recent) is sent as a reference
	// instead: no data, its SHA-256 in TarRef and its size in TarRefSize. The caller
	// must hold those contents already; one it can't vouch for makes it capture again
	// without Refs.
	Refs bool `json:"refs,omitempty"`
	// Remember (exact only): keep the SHA-256 of each file sent whole, for a later
	// capture's Refs. Only the captures whose references the caller will vouch for
	// (its snapshot store's) should: a reference to contents a fork's capture sent
	// would be one the caller can't vouch for.
	Remember bool `json:"remember,omitempty"`
}

// MaxTarEntries bounds the entries of one archive, in both directions: a tree that
// can't come back is refused when it is taken, not when it is given back.
const MaxTarEntries = 1 << 20

// PAX records of an exact archive (TarOutArgs.Exact).
const (
	// TarSparse is a sparse file's data map, "offset:length,…" in the file, with its
	// apparent size as the last pair's end ("size:0"); the entry's contents are the data
	// segments, in order.
	TarSparse = "CWS.sparse"
	// TarSkipped, on a global header, lists what the capture skipped as JSON
	// ([]TarSkip).
	TarSkipped = "CWS.skipped"
	// TarRef is the hex SHA-256 of a file sent as a reference (TarOutArgs.Refs), and
	// TarRefSize its size (the entry's own size is 0).
	TarRef     = "CWS.ref"
	TarRefSize = "CWS.refsize"
)

// TarSkip is an entry an exact archive left out, and why. A path that is not UTF-8
// travels as its bytes (pathBytes) beside a readable form.
type TarSkip struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

type tarSkipJSON struct {
	Path      string `json:"path"`
	PathBytes []byte `json:"pathBytes,omitempty"`
	Why       string `json:"why"`
}

func (s TarSkip) MarshalJSON() ([]byte, error) {
	j := tarSkipJSON{Path: s.Path, Why: s.Why}
	if !utf8.ValidString(s.Path) {
		j.Path, j.PathBytes = strings.ToValidUTF8(s.Path, "\ufffd"), []byte(s.Path)
	}
	return json.Marshal(j)
}

func (s *TarSkip) UnmarshalJSON(b []byte) error {
	var j tarSkipJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	s.Path, s.Why = j.Path, j.Why
	if j.PathBytes != nil {
		s.Path = string(j.PathBytes)
	}
	return nil
}

// TarInArgs extracts the streamed request body, a tar archive, into a directory, all or
// nothing: every entry is validated (name, type, link target, size, Guard) and staged on
// the workspace volume, and only a fully accepted archive is moved into place. Names that
// are absolute or climb with "..", entries written through a symlink, symlinks leading
// out of the workspace, devices, fifos and duplicates are refused. A hard link to an
// earlier regular file of the archive is extracted as a copy; any other is refused.
// A directory merges into an existing one; any other entry replaces what is at its path
// (a directory excepted). MaxBytes bounds the total of file contents, copies included;
// 0 means no limit.
//
// Exact restores what an exact tar.out took, as it was: symlinks are accepted whatever
// their target (they are data: still never followed or written through), hard links are
// made as links, files and directories get their modes and mtimes, and sparse files
// their holes.
type TarInArgs struct {
	Path     string       `json:"path,omitempty"`
	MaxBytes int64        `json:"maxBytes,omitempty"`
	Guard    *guard.Guard `json:"guard,omitempty"`
	Exact    bool         `json:"exact,omitempty"`
}

// TarResult counts what was archived or extracted.
type TarResult struct {
	Files   int       `json:"files"`
	Dirs    int       `json:"dirs"`
	Bytes   int64     `json:"bytes"`
	Skipped []TarSkip `json:"skipped,omitempty"` // exact tar.out: what it left out
}

// BodyCarrier is a result whose bulk bytes travel raw in the done frame's body rather
// than base64 inside its JSON header.
type BodyCarrier interface {
	Body() []byte
	SetBody([]byte)
}

// Body joins stdout and stderr; StdoutLen says where they split.
func (r *ExecResult) Body() []byte {
	r.StdoutLen = len(r.Stdout)
	return append(append(make([]byte, 0, len(r.Stdout)+len(r.Stderr)), r.Stdout...), r.Stderr...)
}

// SetBody splits the done frame's body back into stdout and stderr.
func (r *ExecResult) SetBody(b []byte) { r.Stdout, r.Stderr = splitBody(b, r.StdoutLen) }

// Body joins stdout and stderr; StdoutLen says where they split.
func (r *ProcOutput) Body() []byte {
	r.StdoutLen = len(r.Stdout)
	return append(append(make([]byte, 0, len(r.Stdout)+len(r.Stderr)), r.Stdout...), r.Stderr...)
}

// SetBody splits the done frame's body back into stdout and stderr.
func (r *ProcOutput) SetBody(b []byte) { r.Stdout, r.Stderr = splitBody(b, r.StdoutLen) }

func splitBody(b []byte, n int) ([]byte, []byte) {
	n = max(0, min(n, len(b)))
	return b[:n:n], b[n:]
}

// OpLSP runs one code-intelligence tool of seeds/mcpls-lsp-tools.md against the language
// server the agent keeps for the file's language (see package server/lsp). It is not in
// the client's retry list: a call may start a language server, and the host retries
// nothing that has effects; every tool only reads, so a host that wants a retry may do it.
const OpLSP = "lsp"

// LSPArgs runs one mcpls tool. Args are the tool's arguments as the seed names them
// (snake_case); the host has already normalized file_path to a clean workspace-relative
// path and checked it against the policy (the agent re-checks with Guard on the resolved
// path). Positions are 1-based lines and 1-based characters counted in Unicode code
// points, in arguments and results.
//
// Beyond the seed: workspace_symbol_search accepts an optional file_path that picks the
// language (otherwise every running server is asked, and servers for the languages whose
// marker files are at the workspace root are started); rename_symbol and format_document
// accept and ignore apply (the host applies plans).
type LSPArgs struct {
	Tool  string          `json:"tool"`
	Args  json.RawMessage `json:"args"`
	Guard *guard.Guard    `json:"guard,omitempty"`
}

// LSPResult is the tool's result in the seed's shape, and how many locations (or edits)
// were left out because they point into paths the guard refuses. A result that would not
// fit one answer keeps its first items: Omitted counts the ones left out (an object
// result also says "truncated": true and "omitted" itself).
type LSPResult struct {
	Result  json.RawMessage `json:"result"`
	Dropped int             `json:"dropped,omitempty"`
	Omitted int             `json:"omitted,omitempty"`
}

// Terminal operations: a persistent, policy-checked shell per terminal id (package
// server/shell). The shell is an interpreter inside the agent; it starts no program
// Allowed refuses, and opens no file the guard refuses.
const (
	OpTermRun   = "term.run"
	OpTermRead  = "term.read"
	OpTermInfo  = "term.info"
	OpTermClose = "term.close"
)

// DefaultTerminal is the terminal id used when none is given.
const DefaultTerminal = "default"

// TermRunArgs runs shell syntax in a terminal, or (Background) in a fresh shell.
//
// A terminal keeps its working directory, variables, functions and options from one
// run to the next, and its combined output in a scrollback (TermScrollback bytes) read
// back with OpTermRead. It belongs to the agent and outlives the host's stream; the
// command running in it is killed (process groups, SIGTERM then SIGKILL) when the call
// is cancelled or times out.
//
// Every program the shell would execute — in pipelines, $(…), subshells, functions, and
// the programs env, xargs, find -exec, nice, timeout, nohup, stdbuf, setsid and time
// would run — must be a bare name in Allowed, or the run stops before it starts with a
// CodeCommand error naming it. sh, bash and dash never start: their scripts are
// interpreted in-process with the same checks. Redirections and other files the shell
// opens are resolved beneath the workspace and checked with Guard (CodeDenied; writes
// need the write rules); outside it, only /tmp (no symlinks), /dev/null and the shell's
// own /dev/stdin, /dev/stdout and /dev/stderr may be opened (CodeTraversal). cd may not
// leave the workspace (CodeTraversal).
type TermRunArgs struct {
	ID      string `json:"id,omitempty"` // the terminal; "" is DefaultTerminal. Unused when Background
	Command string `json:"command"`
	// Cwd is workspace-relative: the starting directory of a new terminal or of a
	// background run. An existing terminal stays where its last command left it.
	Cwd string `json:"cwd,omitempty"`
	// Env holds variables the host vetted, exported in a new terminal (or a background
	// run) on top of the fixed base environment, and passed to its programs.
	Env        map[string]string `json:"env,omitempty"`
	TimeoutMS  int64             `json:"timeoutMs,omitempty"`
	Background bool              `json:"background,omitempty"` // a fresh shell; stdout and stderr apart
	OutputCap  int64             `json:"outputCap,omitempty"`  // Background: per stream; 0 = 1 MiB
	Stream     bool              `json:"stream,omitempty"`     // send stdout/stderr events while running
	// Allowed lists the programs that may run: nil allows any bare name on SafePath,
	// an empty list none. It is never omitted on the wire, so [] stays "none".
	Allowed []string `json:"allowed"`
	// EnvAllowlist names the exported shell variables that reach programs beyond the
	// base environment and Env; nil passes none. LD_*, BASH_ENV, ENV, PATH and the
	// like never pass.
	EnvAllowlist []string     `json:"envAllowlist,omitempty"`
	Guard        *guard.Guard `json:"guard,omitempty"`
	// Launch is what every program the shell starts may execute in turn (the Landlock
	// launcher, as for exec); nil: anything.
	Launch *ExecPolicy `json:"launch,omitempty"`
}

// TermScrollback is how many bytes of output a terminal keeps.
const TermScrollback = 1 << 20

// TermRunResult is a finished run. A policy refusal is an error, not a result.
type TermRunResult struct {
	ExitCode int `json:"exitCode"` // -1 when timed out or cancelled
	// Stdout is a terminal run's combined output (what the scrollback kept of it), or a
	// background run's stdout. Both travel in the done frame's body.
	Stdout          []byte `json:"-"`
	Stderr          []byte `json:"-"` // Background only
	StdoutLen       int    `json:"stdoutLen"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	Offset          int64  `json:"offset"`     // terminal: scrollback offset where this run's output starts
	NextOffset      int64  `json:"nextOffset"` // terminal: scrollback offset after it
	Dropped         bool   `json:"dropped,omitempty"`
	Cwd             string `json:"cwd"` // workspace-relative, after the run
	TimedOut        bool   `json:"timedOut,omitempty"`
	Canceled        bool   `json:"canceled,omitempty"`
	Exited          bool   `json:"exited,omitempty"` // the script ran exit: the terminal starts afresh
	DurationMS      int64  `json:"durationMs"`
}

// Body joins stdout and stderr; StdoutLen says where they split.
func (r *TermRunResult) Body() []byte {
	r.StdoutLen = len(r.Stdout)
	return append(append(make([]byte, 0, len(r.Stdout)+len(r.Stderr)), r.Stdout...), r.Stderr...)
}

// SetBody splits the done frame's body back into stdout and stderr.
func (r *TermRunResult) SetBody(b []byte) { r.Stdout, r.Stderr = splitBody(b, r.StdoutLen) }

// TermReadArgs reads a terminal's scrollback from Offset.
type TermReadArgs struct {
	ID     string `json:"id,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`  // at most this many bytes; 0 = all there is
	WaitMS int64  `json:"waitMs,omitempty"` // wait up to this long for output past Offset while a command runs
}

// TermOutput is scrollback from Offset (moved up to the oldest byte kept when Dropped).
type TermOutput struct {
	Data       []byte `json:"-"` // travels in the done frame's body
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"nextOffset"`
	Dropped    bool   `json:"dropped,omitempty"` // output before Offset was overwritten
	Running    bool   `json:"running"`           // a command is running in the terminal
}

// Body is the data.
func (r *TermOutput) Body() []byte { return r.Data }

// SetBody sets the data.
func (r *TermOutput) SetBody(b []byte) { r.Data = b }

// TermIDArgs names a terminal.
type TermIDArgs struct {
	ID string `json:"id,omitempty"`
}

// TermInfo describes the terminal and the system it runs on.
type TermInfo struct {
	OSType    string `json:"osType"`    // "Linux"
	OSVersion string `json:"osVersion"` // PRETTY_NAME of /etc/os-release and the kernel release
	Shell     string `json:"shell"`
	Cwd       string `json:"cwd"`     // workspace-relative; "." for a terminal not yet opened
	Open      bool   `json:"open"`    // the terminal exists
	Running   bool   `json:"running"` // a command is running in it
}
