package launch

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Cache keeps the Ruleset of each policy it was asked for, so that resolving a policy's
// grants and building its ruleset happen once, and a command under a policy seen before
// costs the ruleset's enforcement and nothing else.
//
// A policy is its programs, its dirs and the excluded directory, exactly as given: a
// changed policy is another entry, so a command never runs under the ruleset of an
// older policy. An entry is used only while what its grants were resolved from is
// unchanged: each PATH directory and each dir (their entries, by mtime and ctime), and
// each path a grant was found through (by device, inode, mtime and ctime, symlinks
// followed); otherwise it is built again. On the read-only root file system of a cws
// container nothing there changes; elsewhere a change made while an entry is being
// built can go unseen, as it could between resolving and enforcing without a cache.
type Cache struct {
	path   string // the PATH list names are looked up on
	max    int    // entries kept; the least recently used goes first
	scoped uint64 // the scopes every ruleset's domain has (NewScopedRuleset)
	fence  *Fence // where no ruleset's domain may write; nil: anywhere

	mu    sync.Mutex
	m     map[string]*entry
	clock uint64
}

type entry struct {
	rs    *Ruleset // closed, under Cache.mu, once the entry leaves the cache
	watch []string // what the grants were resolved from
	ids   []fileID // watch's identities, taken when the entry was built
	used  uint64   // Cache.clock at its last use; under Cache.mu
}

// NewCache returns a cache of at most max policies (16 if max ≤ 0) whose program
// names are looked up on path, a PATH list.
func NewCache(path string, max int) *Cache {
	if max <= 0 {
		max = 16
	}
	return &Cache{path: path, max: max, m: map[string]*entry{}}
}

// NewScopedCache is NewCache whose rulesets also scope their domains (Scopes): a
// command started under any of them can't signal, nor connect to an abstract unix
// socket of, a process outside its domain; with a fence, nor write beneath the fenced
// directories.
func NewScopedCache(path string, max int, scoped uint64, fence *Fence) *Cache {
	c := NewCache(path, max)
	c.scoped, c.fence = scoped, fence
	return c
}

// Start is Ruleset.Start under the ruleset that lets only programs (looked up on the
// cache's path, with what executing them takes: Grants) and the files beneath dirs be
// executed; exclude is the workspace, which nothing is granted from.
func (c *Cache) Start(programs, dirs []string, exclude string, start func() error) error {
	rs, err := c.ruleset(programs, dirs, exclude)
	if err != nil {
		return err
	}
	defer rs.Close()
	return rs.Start(start)
}

// ruleset returns a Ruleset of its own (a duplicate descriptor) for the policy, which
// the caller closes: an entry replaced or evicted meanwhile can't close it under it.
func (c *Cache) ruleset(programs, dirs []string, exclude string) (*Ruleset, error) {
	k := key(programs, dirs, exclude)
	for {
		c.mu.Lock()
		e := c.m[k]
		c.mu.Unlock()
		if e != nil && !e.current() {
			e = nil
		}
		if e == nil {
			var err error
			if e, err = c.build(programs, dirs, exclude); err != nil {
				return nil, err
			}
		}
		c.mu.Lock()
		if c.m[k] != e && e.used != 0 { // replaced or evicted since it was read: look again
			c.mu.Unlock()
			continue
		}
		built := e.used == 0
		c.clock++
		e.used = c.clock
		if built {
			c.put(k, e)
		}
		rs, err := e.rs.dup()
		c.mu.Unlock()
		return rs, err
	}
}

// build resolves the policy's grants and builds its ruleset.
func (c *Cache) build(programs, dirs []string, exclude string) (*entry, error) {
	watch := compact(append(filepath.SplitList(c.path), dirs...))
	ids := identify(watch) // before resolving: a change while resolving shows next time
	files, through := resolve(programs, c.path, exclude)
	rs, err := NewScopedRuleset(files, dirs, c.scoped, c.fence)
	if err != nil {
		return nil, err
	}
	through = slices.DeleteFunc(compact(through), func(p string) bool { return slices.Contains(watch, p) })
	return &entry{rs: rs, watch: append(watch, through...), ids: append(ids, identify(through)...)}, nil
}

// compact returns paths without repeats, in order.
func compact(paths []string) []string {
	out := paths[:0:0]
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// put adds e under k (closing what it replaces), then evicts the least recently used
// entries beyond max. The caller holds c.mu.
func (c *Cache) put(k string, e *entry) {
	if old := c.m[k]; old != nil {
		old.rs.Close()
	}
	c.m[k] = e
	for len(c.m) > c.max {
		var lru string
		for k, e := range c.m {
			if lru == "" || e.used < c.m[lru].used {
				lru = k
			}
		}
		c.m[lru].rs.Close()
		delete(c.m, lru)
	}
}

// Close closes every ruleset the cache holds; it must not be used after.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		e.rs.Close()
		delete(c.m, k)
	}
}

// current reports whether everything e's grants were resolved from is as it was.
func (e *entry) current() bool {
	return slices.Equal(identify(e.watch), e.ids)
}

// dup returns a Ruleset on a duplicate of r's descriptor.
func (r *Ruleset) dup() (*Ruleset, error) {
	fd, err := unix.FcntlInt(uintptr(r.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &Ruleset{fd: fd}, nil
}

// fileID is what stat says of a path, symlinks followed; the zero value is a path that
// does not resolve.
type fileID struct {
	dev, ino     uint64
	mtime, ctime unix.Timespec
}

func identify(paths []string) []fileID {
	ids := make([]fileID, len(paths))
	for i, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			ids[i] = fileID{dev: st.Dev, ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim}
		}
	}
	return ids
}

// key spells a policy unambiguously: each string with its length.
func key(programs, dirs []string, exclude string) string {
	var b strings.Builder
	for _, list := range [][]string{programs, dirs, {exclude}} {
		b.WriteString(strconv.Itoa(len(list)))
		b.WriteByte(';')
		for _, s := range list {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}
