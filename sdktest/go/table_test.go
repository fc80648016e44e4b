package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	tableRow   = regexp.MustCompile("^\\| (`[^|]*)\\| `([A-Z]+) (/[^`]+)` \\|")
	backticked = regexp.MustCompile("`([^`]+)`")
	goMethod   = regexp.MustCompile(`\nfunc \(\w+ \*(\w+)\) (\w+)\(`)
	goRequest  = regexp.MustCompile(`\.client,\s*"([A-Z]+)",\s*"([^"]+)"`)
)

// docs/svix.md's table names every call of the Go SDK this module
// requires, with its route: each method of the package's types that makes
// a request (internal/app's TestSvixSupportTable then calls every row).
func TestSupportTableCoversSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/svix/svix-webhooks").Output()
	if err != nil {
		t.Fatalf("go list the SDK's module: %v", err)
	}
	sdk := filepath.Join(strings.TrimSpace(string(out)), "go")
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "svix.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // route: names
	for _, line := range strings.Split(string(raw), "\n") {
		if m := tableRow.FindStringSubmatch(line); m != nil {
			for _, n := range backticked.FindAllStringSubmatch(m[1], -1) {
				rows[m[2]+" "+m[3]] = append(rows[m[2]+" "+m[3]], n[1])
			}
		}
	}
	files, err := filepath.Glob(filepath.Join(sdk, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		methods := goMethod.FindAllSubmatchIndex(src, -1)
		for _, req := range goRequest.FindAllSubmatchIndex(src, -1) {
			name := ""
			for _, m := range methods {
				if m[0] < req[0] {
					name = string(src[m[2]:m[3]]) + "." + string(src[m[4]:m[5]])
				}
			}
			route := string(src[req[2]:req[3]]) + " " + string(src[req[4]:req[5]])
			calls++
			if !slices.Contains(rows[route], name) {
				t.Errorf("the Go SDK's %s (%s, %s) is not in docs/svix.md's table (that route names %v)", name, route, filepath.Base(f), rows[route])
			}
		}
	}
	if calls < 80 {
		t.Fatalf("found %d calls in %s: is it still the SDK's source?", calls, sdk)
	}
}
