package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlagSet makes a command's flag set; its usage line comes first in --help.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hookd %s\n\nEvery flag can also be set as HOOKD_<FLAG> (--allow-network: HOOKD_ALLOW_NETWORK, comma-separated for repeatable flags).\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args after applying HOOKD_<FLAG> environment fallbacks,
// so a flag on the command line wins over the environment.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		// Repeatable flags take a comma-separated list from the environment.
		if _, ok := f.Value.(*listFlag); ok {
			for _, part := range strings.Split(v, ",") {
				if err = f.Value.Set(strings.TrimSpace(part)); err != nil {
					break
				}
			}
		} else {
			err = f.Value.Set(v)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", envName(f.Name), err)
		}
	})
	if err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	// No command takes arguments, and Go's flag package stops at the first
	// one: "serve h.db --addr :9" would drop --addr and open ./hookd.db.
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q: every setting is a flag (--db FILE)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "HOOKD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// strayEnv lists the HOOKD_ variables in environ that set none of fs's
// flags: a misspelt HOOKD_RETENTON is otherwise ignored without a word,
// and the setting it meant silently takes its default. also names the
// variables the command reads besides its flags; HOOKD_TEST_ ones belong
// to the test suite.
func strayEnv(fs *flag.FlagSet, environ []string, also ...string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	for _, a := range also {
		known[a] = true
	}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "HOOKD_") && !strings.HasPrefix(k, "HOOKD_TEST_") && !known[k] {
			out = append(out, k)
		}
	}
	return out
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
