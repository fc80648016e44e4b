package main

import (
	"io"
	"slices"
	"testing"
)

// A HOOKD_ variable that sets no flag is named, so a misspelling is seen;
// the flags' own variables, the command's others and the test suite's are not.
func TestStrayEnvNamesMisspeltVariables(t *testing.T) {
	fs := newFlagSet("serve", "serve [flags]", io.Discard)
	fs.String("retention", "", "")
	fs.String("allow-network", "", "")
	got := strayEnv(fs, []string{"HOOKD_RETENTION=1h", "HOOKD_RETENTON=1h", "HOOKD_ALLOW_NETWORK=x",
		"HOOKD_SECRET_KEY=k", "HOOKD_TEST_POSTGRES_URL=p", "HOME=/root", "HOOKD_ADMIN_TOKN"}, "HOOKD_SECRET_KEY")
	if want := []string{"HOOKD_RETENTON", "HOOKD_ADMIN_TOKN"}; !slices.Equal(got, want) {
		t.Fatalf("stray = %v, want %v", got, want)
	}
}
