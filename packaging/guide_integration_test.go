package packaging_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/runtime"
)

// walkthrough returns the shell blocks of the operator guide marked
// `<!-- walkthrough -->`, in order.
func walkthrough(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []string
	var cur *strings.Builder
	marked := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		case line == "<!-- walkthrough -->":
			marked = true
		case marked && line == "```sh":
			cur = &strings.Builder{}
			fmt.Fprintf(cur, "# %s:%d\n", filepath.Base(path), n)
			marked = false
		case marked && line != "":
			t.Fatalf("%s:%d: the walkthrough mark is not followed by a ```sh block", path, n)
		}
	}
	if cur != nil {
		t.Fatalf("%s: a walkthrough block is not closed", path)
	}
	return blocks
}

// TestOperatorGuideWalkthrough runs docs/operator-guide.md's walkthrough
// as written, against an airlock installed as `make install` does (into a
// temporary prefix) and started from its unit, with the world's stand-ins
// for the deploy API, its resolver and the uplink.
func TestOperatorGuideWalkthrough(t *testing.T) {
	testutil.RequiresRoot(t)
	bin, image := os.Getenv("AIRLOCK_BIN_DIR"), os.Getenv("AIRLOCK_AGENT_IMAGE")
	if bin == "" || image == "" {
		t.Fatal("AIRLOCK_BIN_DIR and AIRLOCK_AGENT_IMAGE are not set: run the integration tests through `make test`")
	}
	blocks := walkthrough(t, "../docs/operator-guide.md")
	if len(blocks) < 4 {
		t.Fatalf("the guide has %d walkthrough blocks, want the four of sections 3 to 6", len(blocks))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	l := newLayout(t)
	t.Cleanup(func() {
		_ = (&runtime.Embedded{Dir: filepath.Join(l.state, "containerd")}).Stop(context.Background(), 10*time.Second)
		if err := mountinfo.UnmountAll(l.dir); err != nil {
			t.Errorf("unmount %s: %v", l.dir, err)
		}
		os.RemoveAll(l.dir)
	})
	w, err := world.Start(ctx, world.Config{Prefix: "g" + runtime.Prefix(l.dir)[2:]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("world: %v", err)
		}
	})
	// The deploy API the guide's task calls.
	var mu sync.Mutex
	var calls []string
	api := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		fmt.Fprintf(rw, "{\"service\": \"shop\"}\n")
	})
	if err := w.AddHost("deploy.corp.test", w.Net().Addr().Next().Next().Next().Next(), world.WithHandler(api)); err != nil {
		t.Fatal(err)
	}

	l.script(t, nil, "install", bin, "--image", "agent="+image)
	// Section 1's configuration step, with the world's values.
	conf := filepath.Join(l.sysconf, "airlock/airlockd.hcl")
	cf, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(cf, "\nuplink        = %q\ndns_upstream  = [%q]\nallow_private = [%q]\n",
		"netns:"+w.NetnsName(), w.DNSAddr().String(), w.Net().String())
	if err := cf.Close(); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, l)

	home := filepath.Join(l.dir, "home/op")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "set -euo pipefail\n" + strings.Join(blocks, "")
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "PREFIX="+l.prefix, "HOME="+home, "AIRLOCK_SOCKET="+svc.socket)
	out, err := cmd.CombinedOutput()
	t.Logf("walkthrough output:\n%s", out)
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\nscript:\n%s\ndaemon:\n%s", err, script, svc.log())
	}

	// What the walkthrough did, seen from outside it.
	mu.Lock()
	got := strings.Join(calls, "\n")
	mu.Unlock()
	if want := "GET /v1/services/shop \nPOST /v1/services/shop/scale replicas=3"; got != want {
		t.Errorf("the deploy API saw:\n%s\nwant:\n%s", got, want)
	}
	b, err := os.ReadFile(filepath.Join(home, "src/shop/deploy.yaml"))
	if err != nil || string(b) != "service: shop\nreplicas: 3\n" {
		t.Errorf("deploy.yaml after the commit: %q, %v", b, err)
	}
	for _, want := range []string{"hello from airlock", "three replicas for the sale", "allowed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	if ps, err := svc.cli("ps", "-aq"); err != nil || strings.TrimSpace(ps) != "" {
		t.Errorf("sessions left after the walkthrough: %q, %v", ps, err)
	}
}
