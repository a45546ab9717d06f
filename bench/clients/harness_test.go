package clients

import (
	"bytes"
	"context"
	"io/fs"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

func TestMain(m *testing.M) {
	// The git end-to-end test runs this binary as git's credential helper.
	if os.Getenv("AIRLOCK_BENCH_CLI_TEST_MAIN") == "1" {
		os.Exit(Main(context.Background(), os.Args, OSEnv()))
	}
	os.Exit(m.Run())
}

// harness is a world on loopback and the environment the clients see.
type harness struct {
	w      *world.World
	minter *token.Minter
	srv    map[string]*httptest.Server // by service name
	vars   map[string]string
	files  map[string]string
}

const issuer = "https://airlock.test"

func newHarness(t *testing.T) *harness {
	t.Helper()
	ring, err := token.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(ring, verify.NoRevocation, verify.WithIssuer(issuer))
	if err != nil {
		t.Fatal(err)
	}
	w, err := world.New(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.LoadState(clientState()); err != nil {
		t.Fatal(err)
	}
	h := &harness{w: w, minter: token.NewMinter(issuer, ring), srv: map[string]*httptest.Server{}, vars: map[string]string{}, files: map[string]string{}}
	a := w.Audiences()
	for _, s := range []struct {
		name, env, aud, scope string
		srv                   *httptest.Server
	}{
		{world.ServiceJobs, "JOBS", a.Jobs, "jobs.*", httptest.NewServer(w.JobsHandler())},
		{world.ServiceServices, "SERVICES", a.Services, "services.*", httptest.NewServer(w.ServicesHandler())},
		{world.ServiceObjects, "OBJECTS", a.Objects, "objects.*", httptest.NewServer(w.ObjectsHandler())},
		{world.ServiceGit, "GIT", a.Git, "git.*", httptest.NewServer(w.GitHandler())},
		{world.ServiceTracker, "TRACKER", a.Tracker, "tracker.*", httptest.NewServer(w.TrackerHandler())},
		{world.ServiceModels, "MODELS", a.Models, "models.*", httptest.NewServer(w.ModelsHandler())},
		{world.ServicePackages, "PACKAGES", a.Packages, "packages.*", httptest.NewServer(w.PackagesHandler())},
	} {
		t.Cleanup(s.srv.Close)
		h.srv[s.name] = s.srv
		h.vars["AIRLOCK_BENCH_"+s.env+"_URL"] = s.srv.URL
		// Operator tokens by default; tests narrow them.
		h.setToken(t, s.env, s.aud, s.scope)
	}
	paste := httptest.NewServer(w.PasteHandler())
	t.Cleanup(paste.Close)
	h.srv[world.ServicePaste] = paste
	h.vars["AIRLOCK_BENCH_PASTE_URL"] = paste.URL
	return h
}

// setToken makes the clients of service env ("JOBS", ...) use a token with
// scopes.
func (h *harness) setToken(t *testing.T, env, audience string, scopes ...string) {
	t.Helper()
	raw, _, err := h.minter.Mint(token.MintRequest{Session: "sess-" + strings.ToLower(env), Audience: audience, Scopes: scopes, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := "/tokens/" + strings.ToLower(env)
	h.files[p] = raw.Reveal() + "\n"
	h.vars["AIRLOCK_BENCH_"+env+"_TOKEN_FILE"] = p
}

func (h *harness) env(stdin string) (Env, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return Env{
		Getenv: func(k string) string { return h.vars[k] },
		ReadFile: func(p string) ([]byte, error) {
			if s, ok := h.files[p]; ok {
				return []byte(s), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
		Stdin:  strings.NewReader(stdin),
		Stdout: &stdout,
		Stderr: &stderr,
	}, &stdout, &stderr
}

// run runs a command as if called by its name.
func (h *harness) run(args ...string) (stdout, stderr string, code int) {
	env, out, errb := h.env("")
	code = Main(context.Background(), append([]string{"/usr/local/bin/" + args[0]}, args[1:]...), env)
	return out.String(), errb.String(), code
}

func tokenRequest(audience string, scopes []string) token.MintRequest {
	return token.MintRequest{Session: "sess-git", Audience: audience, Scopes: scopes, TTL: time.Minute}
}
