package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Environment of this test binary run as another user by
// TestReservedLabelsNeedRoot: the socket to create on, and the label.
const (
	peerSocketEnv = "AIRLOCK_HTTPAPI_TEST_PEER_SOCKET"
	peerLabelEnv  = "AIRLOCK_HTTPAPI_TEST_PEER_LABEL"
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(peerSocketEnv); sock != "" {
		os.Exit(peerCreate(sock, os.Getenv(peerLabelEnv)))
	}
	os.Exit(m.Run())
}

// peerCreate posts a create with label (key=value) on the API socket and
// prints the status code and body: what a member of the socket's group
// runs.
func peerCreate(sock, label string) int {
	k, v, _ := strings.Cut(label, "=")
	b, _ := json.Marshal(api.CreateRequest{Labels: map[string]string{k: v}})
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://airlock/v1/sessions", "application/json", bytes.NewReader(b))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	return 0
}

// TestReservedLabelsNeedRoot is the socket group's attack on the
// Kubernetes node agent: a member of the API socket's group (uid 65534
// here, in its group) creates a local session carrying the label by
// which the agent adopts a pending Session's local session
// (airlock.dev/session-uid), to forge what that Session reports. The API
// refuses labels under airlock.dev/ from anyone but root on the socket,
// before the daemon's Create is reached; root may set them, and the
// member's other labels pass.
func TestReservedLabelsNeedRoot(t *testing.T) {
	testutil.RequiresRoot(t)
	grp, err := user.LookupGroupId("65534")
	if err != nil {
		t.Fatalf("the group of gid 65534 (Debian's nogroup): %v", err)
	}
	dir, err := os.MkdirTemp("", "reserved-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// This test binary, where the other user may run it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "httpapi.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}

	reached := make(chan map[string]string, 4)
	f := &fakeDaemon{create: func(req api.CreateRequest) (*api.Session, error) {
		reached <- req.Labels
		return &api.Session{ID: "made"}, nil
	}}
	sock := filepath.Join(dir, "airlock.sock")
	ctx, cancel := context.WithCancel(quietCtx())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, f, sock, grp.Name) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the API socket did not appear")
		}
	}

	create := func(uid uint32, label string) string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = []string{peerSocketEnv + "=" + sock, peerLabelEnv + "=" + label}
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 65534, Groups: []uint32{}}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("create as uid %d: %v: %s", uid, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	reachedCreate := func() map[string]string {
		select {
		case l := <-reached:
			return l
		default:
			return nil
		}
	}

	out := create(65534, "airlock.dev/session-uid=2b0c6f3e-8a47-4c1f-9d55-0f5d3b7f2a10")
	if !strings.HasPrefix(out, strconv.Itoa(http.StatusForbidden)+" ") || !strings.Contains(out, "only root may set them") {
		t.Errorf("a group member's create with airlock.dev/session-uid: %q, want 403 saying only root may", out)
	}
	if l := reachedCreate(); l != nil {
		t.Errorf("the group member's create reached the daemon with %v", l)
	}
	if out := create(65534, "team=blue"); !strings.HasPrefix(out, "201 ") {
		t.Errorf("a group member's create with a label of its own: %q, want 201", out)
	} else if l := reachedCreate(); l["team"] != "blue" {
		t.Errorf("the group member's own label reached the daemon as %v", l)
	}
	if out := create(0, "airlock.dev/session-uid=2b0c6f3e-8a47-4c1f-9d55-0f5d3b7f2a10"); !strings.HasPrefix(out, "201 ") {
		t.Errorf("root's create with airlock.dev/session-uid: %q, want 201", out)
	} else if l := reachedCreate(); l["airlock.dev/session-uid"] == "" {
		t.Errorf("root's reserved label reached the daemon as %v", l)
	}
}
