package app

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Svix's official SDKs run the flow docs/svix.md promises against a real
// hookd on SQLite, delivering to loopback receivers: the Go SDK from the
// test module in sdktest/go, the npm one from sdktest/node/flow.mjs. Each
// runs in a process of its own, so the SDKs never enter hookd's module.

// sdkEnv is the environment an SDK flow reads: where hookd is, and the
// admin token (Svix's organisation token).
func sdkEnv(e *env) []string {
	return append(os.Environ(), "HOOKD_SDK_URL="+e.base, "HOOKD_SDK_TOKEN="+adminToken)
}

func runFlow(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in %s failed after %s: %v\n%s", cmd.Args, cmd.Dir, time.Since(start).Round(time.Millisecond), err, out)
	}
	t.Logf("%s passed in %s\n%s", cmd.Args, time.Since(start).Round(time.Millisecond), out)
}

func TestSvixGoSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the SDK test module: not in -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build sdktest/go")
	}
	e := start(t, true)
	cmd := exec.Command(goTool, "test", "-count=1", "-v", "./...")
	cmd.Dir = filepath.Join("..", "..", "sdktest", "go")
	cmd.Env = sdkEnv(e)
	runFlow(t, cmd)
}

// TestSvixNodeSDK needs node and sdktest/node's packages (npm ci there);
// without them it skips, unless HOOKD_TEST_NODE=required (CI) makes it fail.
func TestSvixNodeSDK(t *testing.T) {
	dir := filepath.Join("..", "..", "sdktest", "node")
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed"
	case !exists(filepath.Join(dir, "node_modules", "svix")):
		missing = "sdktest/node has no node_modules (run npm ci there)"
	}
	if missing != "" {
		if os.Getenv("HOOKD_TEST_NODE") == "required" {
			t.Fatalf("HOOKD_TEST_NODE=required but %s", missing)
		}
		t.Skip(missing)
	}
	e := start(t, true)
	cmd := exec.Command(node, "flow.mjs")
	cmd.Dir = dir
	cmd.Env = sdkEnv(e)
	runFlow(t, cmd)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
