package send

import (
	"net/http"
	"strings"
	"testing"

	"hookd/internal/core"
)

// An answer's headers are kept as whole lines, by name, several values
// joined, valid UTF-8, within the first KiB.
func TestHeaderText(t *testing.T) {
	h := http.Header{"X-B": {"2"}, "Content-Type": {"text/html"}, "X-A": {"1", "one"}, "X-Bad": {"\xff\x00"}}
	if got, want := headerText(h), "Content-Type: text/html\nX-A: 1, one\nX-B: 2\nX-Bad: \uFFFD\uFFFD\n"; got != want {
		t.Errorf("headerText = %q, want %q", got, want)
	}
	long := http.Header{}
	for _, c := range "abcdefghijklmnopqrstuvwxyz" {
		long.Set("X-"+string(c), strings.Repeat("v", 60))
	}
	got := headerText(long)
	if len(got) > core.MaxResponseHead || !strings.HasSuffix(got, "\n") || !strings.HasPrefix(got, "X-A: ") {
		t.Errorf("long headers: %d bytes ending %q, want whole lines within %d", len(got), got[len(got)-5:], core.MaxResponseHead)
	}
}
