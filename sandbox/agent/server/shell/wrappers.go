package shell

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// wrapper describes the command line of a program that runs another program given as
// its operands. Options not listed are refused: an option we don't know might take an
// argument, and we would check the wrong word as the program.
type wrapper struct {
	flags      string          // short options without an argument
	args       string          // short options with an argument (attached or next word)
	long       map[string]bool // long options; true when they take an argument
	positional int             // operands before the program (timeout's duration)
	env        bool            // NAME=VALUE operands before the program
	numeric    bool            // -N is an option (nice's adjustment)
	refused    map[string]string
}

var wrappers = map[string]wrapper{
	"env": {flags: "i0v", args: "uC", env: true,
		long:    map[string]bool{"ignore-environment": false, "null": false, "debug": false, "unset": true, "chdir": true},
		refused: map[string]string{"S": "-S splits a string into a command line that cannot be checked", "split-string": "--split-string splits a string into a command line that cannot be checked"}},
	"nice":    {args: "n", numeric: true, long: map[string]bool{"adjustment": true}},
	"nohup":   {},
	"setsid":  {flags: "cfw", long: map[string]bool{"ctty": false, "fork": false, "wait": false}},
	"stdbuf":  {args: "ioe", long: map[string]bool{"input": true, "output": true, "error": true}},
	"time":    {flags: "pvaq", args: "of", long: map[string]bool{"portability": false, "verbose": false, "append": false, "quiet": false, "output": true, "format": true}},
	"timeout": {flags: "v", args: "ks", positional: 1, long: map[string]bool{"preserve-status": false, "foreground": false, "verbose": false, "kill-after": true, "signal": true}},
}

// errLater is a wrapper option only known at run time, met by the static pre-check.
var errLater = errors.New("known only at run time")

// opt is one option a wrapper was given, by its short or long name.
type opt struct{ name, val string }

// split parses a wrapper's options and returns the program it would run with its
// arguments, the NAME=VALUE operands (env), and the options.
func (w wrapper) split(name string, rest []word) (target, env []word, err error) {
	target, env, _, err = w.parse(name, rest)
	return target, env, err
}

func (w wrapper) parse(name string, rest []word) (target, env []word, opts []opt, err error) {
	i := 0
	next := func() string {
		if i+1 < len(rest) {
			i++
			return rest[i].s
		}
		return ""
	}
	for ; i < len(rest); i++ {
		a := rest[i]
		if a.kind != known {
			if a.kind == later {
				return nil, nil, nil, errLater
			}
			return nil, nil, nil, refuse(name, "an option from input cannot be checked")
		}
		s := a.s
		if s == "--" {
			i++
			break
		}
		if name == "env" && s == "-" {
			opts = append(opts, opt{name: "i"})
			continue
		}
		if !strings.HasPrefix(s, "-") || s == "-" {
			break
		}
		if strings.HasPrefix(s, "--") {
			n, val, hasVal := strings.Cut(s[2:], "=")
			if n == "help" || n == "version" {
				return nil, nil, nil, nil // runs nothing
			}
			if why, ok := w.refused[n]; ok {
				return nil, nil, nil, refuse(name, "%s", why)
			}
			takes, ok := w.long[n]
			if !ok {
				return nil, nil, nil, refuse(name, "unknown option %s: cannot tell which program it would run", s)
			}
			if takes && !hasVal {
				val = next()
			}
			opts = append(opts, opt{name: n, val: val})
			continue
		}
		if w.numeric && isNumber(strings.TrimPrefix(s[1:], "-")) {
			opts = append(opts, opt{name: "n", val: s[1:]})
			continue
		}
		for j := 1; j < len(s); j++ {
			ch := s[j : j+1]
			if why, ok := w.refused[ch]; ok {
				return nil, nil, nil, refuse(name, "%s", why)
			}
			if strings.Contains(w.flags, ch) {
				opts = append(opts, opt{name: ch})
				continue
			}
			if strings.Contains(w.args, ch) {
				val := s[j+1:]
				if val == "" {
					val = next()
				}
				opts = append(opts, opt{name: ch, val: val})
				break
			}
			return nil, nil, nil, refuse(name, "unknown option -%s: cannot tell which program it would run", ch)
		}
	}
	for k := 0; k < w.positional && i < len(rest); k++ {
		if rest[i].kind != known && rest[i].kind != later {
			return nil, nil, nil, refuse(name, "an operand from input cannot be checked")
		}
		opts = append(opts, opt{name: "", val: rest[i].s})
		i++
	}
	for w.env && i < len(rest) {
		if rest[i].kind == later {
			return nil, nil, nil, errLater
		}
		if n, _, ok := strings.Cut(rest[i].s, "="); !ok || n == "" {
			break
		}
		env = append(env, rest[i])
		i++
	}
	return rest[min(i, len(rest)):], env, opts, nil
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return s != "" && err == nil
}

// peeled is a shell found beneath wrappers, to be interpreted in-process: the wrappers'
// effects that matter to it are applied by the interpreter instead.
type peeled struct {
	argv    []string          // sh or bash and its arguments
	env     map[string]string // env's NAME=VALUE
	unset   []string          // env -u
	clear   bool              // env -i
	dir     string            // env -C
	timeout time.Duration     // timeout's duration
}

// peel looks beneath env, nice, nohup, setsid, stdbuf, time and timeout for sh, bash or
// dash. It reports false when argv doesn't end in a shell.
func peel(argv []string) (peeled, bool) {
	p := peeled{env: map[string]string{}}
	ws := knownWords(argv)
	for len(ws) > 0 {
		switch ws[0].s {
		case "sh", "bash", "dash":
			p.argv = wordStrings(ws, false)
			return p, true
		}
		w, ok := wrappers[ws[0].s]
		if !ok {
			return p, false
		}
		target, env, opts, err := w.parse(ws[0].s, ws[1:])
		if err != nil {
			return p, false
		}
		for _, o := range opts {
			switch {
			case ws[0].s == "env" && (o.name == "i" || o.name == "ignore-environment"):
				p.clear = true
				clear(p.env)
			case ws[0].s == "env" && (o.name == "u" || o.name == "unset"):
				p.unset = append(p.unset, o.val)
				delete(p.env, o.val)
			case ws[0].s == "env" && (o.name == "C" || o.name == "chdir"):
				p.dir = o.val
			case ws[0].s == "timeout" && o.name == "":
				if d, ok := parseDuration(o.val); ok && (p.timeout == 0 || d < p.timeout) && d > 0 {
					p.timeout = d
				}
			}
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv.s, "=")
			p.env[k] = v
		}
		ws = target
	}
	return p, false
}

// parseDuration reads timeout(1)'s DURATION: a number with an optional s, m, h or d.
func parseDuration(s string) (time.Duration, bool) {
	unit := time.Second
	switch {
	case strings.HasSuffix(s, "s"):
		s = s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		s, unit = s[:len(s)-1], time.Minute
	case strings.HasSuffix(s, "h"):
		s, unit = s[:len(s)-1], time.Hour
	case strings.HasSuffix(s, "d"):
		s, unit = s[:len(s)-1], 24*time.Hour
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(unit)), true
}
