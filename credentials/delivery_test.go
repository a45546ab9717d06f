package credentials

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/policies"
)

// fakeMinter records what delivery asks of a broker.
type fakeMinter struct {
	mu        sync.Mutex
	n         int
	mintErr   error
	minted    []string // session/name
	refreshed []string
	revoked   []string
}

func (f *fakeMinter) issueLocked(session, name string) *Credential {
	f.n++
	return &Credential{Name: name, Token: token.Secret(fmt.Sprintf("tok-%s-%s-%d", session, name, f.n)),
		Expiry: time.Now().Add(time.Hour)}
}

func (f *fakeMinter) Mint(_ context.Context, session string, reqs []Request) ([]*Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mintErr != nil {
		return nil, f.mintErr
	}
	out := make([]*Credential, len(reqs))
	for i, r := range reqs {
		out[i] = f.issueLocked(session, r.Name)
		f.minted = append(f.minted, session+"/"+r.Name)
	}
	return out, nil
}

func (f *fakeMinter) Refresh(_ context.Context, session, name string) (*Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshed = append(f.refreshed, session+"/"+name)
	return f.issueLocked(session, name), nil
}

func (f *fakeMinter) Refresher(session, name string, write func(context.Context, *Credential) error) *Refresher {
	return &Refresher{
		Refresh: func(ctx context.Context) (*Credential, error) { return f.Refresh(ctx, session, name) },
		Write:   write,
	}
}

func (f *fakeMinter) Revoke(_ context.Context, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, session)
}

func (f *fakeMinter) Revise(_ context.Context, session string, mint []Request, drop []string, _ string) ([]*Credential, []TokenID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mintErr != nil {
		return nil, nil, f.mintErr
	}
	out := make([]*Credential, len(mint))
	for i, r := range mint {
		out[i] = f.issueLocked(session, r.Name)
		f.minted = append(f.minted, session+"/"+r.Name)
	}
	for _, name := range drop {
		f.revoked = append(f.revoked, session+"/"+name)
	}
	return out, nil, nil
}

func (f *fakeMinter) Live(string) map[string]string { return nil }

func (f *fakeMinter) Grants(string) map[string]Request { return nil }

func (f *fakeMinter) calls() (minted, refreshed, revoked []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.minted), slices.Clone(f.refreshed), slices.Clone(f.revoked)
}

func fileCred(name, path string) policies.Credential {
	return policies.Credential{Name: name, Issuer: "airlock", Audience: "a.test", Scopes: []string{"x"}, Deliver: policies.DeliverFile, Path: path}
}

func envCred(name, envVar string) policies.Credential {
	return policies.Credential{Name: name, Issuer: "airlock", Audience: "a.test", Scopes: []string{"x"}, Deliver: policies.DeliverEnv, EnvVar: envVar}
}

func TestCredentialDirs(t *testing.T) {
	creds := []policies.Credential{
		fileCred("git", ""),
		envCred("reg", "REG"),
		fileCred("kube", "/home/agent/.kube/token"),
		fileCred("jobs", "/run/airlock/credentials/jobs"),
		fileCred("aws", "/home/agent/.kube/other"),
		fileCred("npm", "/etc/npm/token"),
	}
	got := credentialDirs("/T", fileCredentials(creds))
	want := map[string]string{
		policies.CredentialDir: "/T/0", // git (default path) and jobs
		"/home/agent/.kube":    "/T/1", // kube and aws
		"/etc/npm":             "/T/2",
	}
	if len(got) != len(want) {
		t.Fatalf("credentialDirs = %v, want %v", got, want)
	}
	for dir, sub := range want {
		if got[dir] != sub {
			t.Errorf("credentialDirs[%q] = %q, want %q", dir, got[dir], sub)
		}
	}
	if got := credentialDirs("/T", fileCredentials([]policies.Credential{envCred("a", "A")})); len(got) != 0 {
		t.Errorf("env-delivered credentials got directories: %v", got)
	}
}

func TestPlanSpecOpt(t *testing.T) {
	d := NewDelivery(t.Context(), &fakeMinter{})
	t.Cleanup(d.Close)
	p := d.Reopen("/S", []policies.Credential{
		fileCred("b", "/z/b"), fileCred("a", "/a/a"), envCred("e", "E"), fileCred("c", "/z/c"),
	}, 1000, 1000, nil)
	var s oci.Spec
	if err := p.SpecOpt()(t.Context(), nil, nil, &s); err != nil {
		t.Fatal(err)
	}
	want := []struct{ dst, src string }{{"/a", "/S/creds/1"}, {"/z", "/S/creds/0"}}
	if len(s.Mounts) != len(want) {
		t.Fatalf("mounts %+v, want %v", s.Mounts, want)
	}
	for i, m := range s.Mounts {
		if m.Destination != want[i].dst || m.Source != want[i].src || m.Type != "bind" {
			t.Errorf("mount %d: %s from %s (%s), want %s from %s", i, m.Destination, m.Source, m.Type, want[i].dst, want[i].src)
		}
		for _, o := range []string{"rbind", "ro", "nosuid", "nodev", "noexec"} {
			if !slices.Contains(m.Options, o) {
				t.Errorf("mount %s lacks %q: %v", m.Destination, o, m.Options)
			}
		}
		if slices.Contains(m.Options, "rw") {
			t.Errorf("mount %s is writable: %v", m.Destination, m.Options)
		}
	}
	var none oci.Spec
	if err := d.Reopen("/S", []policies.Credential{envCred("e", "E")}, 0, 0, nil).SpecOpt()(t.Context(), nil, nil, &none); err != nil || len(none.Mounts) != 0 {
		t.Errorf("env-only plan: mounts %v, err %v", none.Mounts, err)
	}
}

// reopenAt is a plan over dir whose credential directories exist (as
// Prepare would have made them), without a tmpfs.
func reopenAt(t *testing.T, d *Delivery, dir string, creds []policies.Credential) *Plan {
	t.Helper()
	p := d.Reopen(dir, creds, uint32(os.Getuid()), uint32(os.Getgid()), nil)
	for _, sub := range p.dirs {
		if err := os.MkdirAll(sub, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestPlanMint(t *testing.T) {
	f := &fakeMinter{}
	d := NewDelivery(t.Context(), f)
	t.Cleanup(d.Close)
	dir := t.TempDir()
	creds := []policies.Credential{fileCred("git", ""), envCred("reg", "REG"), fileCred("kube", "/k/token"), envCred("npm", "NPM")}
	p := reopenAt(t, d, dir, creds)
	if err := p.Mint(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	if minted, _, _ := f.calls(); !slices.Equal(minted, []string{"s1/git", "s1/reg", "s1/kube", "s1/npm"}) {
		t.Errorf("minted %v", minted)
	}
	for file, want := range map[string]string{
		filepath.Join(dir, TmpfsDir, "0", "git"):   "tok-s1-git-1",
		filepath.Join(dir, TmpfsDir, "1", "token"): "tok-s1-kube-3",
	} {
		b, err := os.ReadFile(file)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", file, b, err, want)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm() != 0o400 {
			t.Errorf("%s: mode %v, want 0400", file, fi.Mode())
		}
	}
	if env := p.Env(); !slices.Equal(env, []string{"REG=tok-s1-reg-2", "NPM=tok-s1-npm-4"}) {
		t.Errorf("Env() = %v", env)
	}
	// The command gets the same tokens; nothing is minted again.
	if env, err := p.StartEnv(t.Context(), "s1"); err != nil || !slices.Equal(env, p.Env()) {
		t.Errorf("StartEnv = %v, %v; want %v", env, err, p.Env())
	}
	if _, refreshed, _ := f.calls(); len(refreshed) != 0 {
		t.Errorf("StartEnv of a minted plan refreshed %v", refreshed)
	}
}

func TestPlanMintFailure(t *testing.T) {
	t.Run("a delivery failure revokes", func(t *testing.T) {
		f := &fakeMinter{}
		d := NewDelivery(t.Context(), f)
		t.Cleanup(d.Close)
		// The directory of the file credential is missing: delivery fails.
		p := d.Reopen(t.TempDir(), []policies.Credential{fileCred("git", "")}, 0, 0, nil)
		err := p.Mint(t.Context(), "s1")
		if err == nil || !strings.Contains(err.Error(), `credential "git": deliver`) {
			t.Fatalf("Mint = %v, want a delivery error", err)
		}
		if _, _, revoked := f.calls(); !slices.Equal(revoked, []string{"s1"}) {
			t.Errorf("revoked %v, want s1", revoked)
		}
	})
	for _, tc := range []struct {
		err  error
		want func(error) bool
	}{
		{fmt.Errorf("bad name: %w", errdefs.ErrInvalidArgument), errdefs.IsInvalidArgument},
		{fmt.Errorf("no issuer: %w", errdefs.ErrNotFound), errdefs.IsNotFound},
		{errors.New("issuer down"), errdefs.IsFailedPrecondition},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			d := NewDelivery(t.Context(), &fakeMinter{mintErr: tc.err})
			t.Cleanup(d.Close)
			err := d.Reopen(t.TempDir(), []policies.Credential{envCred("e", "E")}, 0, 0, nil).Mint(t.Context(), "s1")
			if !tc.want(err) || !errors.Is(err, tc.err) {
				t.Errorf("Mint = %v, want its class kept", err)
			}
		})
	}
}

func TestPrepareWithoutDelivery(t *testing.T) {
	var d *Delivery
	if _, err := d.Prepare(t.TempDir(), []policies.Credential{envCred("e", "E")}, 0, 0); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Prepare without a broker: %v, want failed precondition", err)
	}
	if p, err := d.Prepare(t.TempDir(), nil, 0, 0); err != nil || p.Env() != nil {
		t.Errorf("Prepare of no credentials without a broker: %v", err)
	}
}

// TestReopenedPlan: a plan of an earlier daemon process knows no token.
// Exec'd processes get no env credential from it; the command started by
// this process gets freshly minted ones, and so do later exec'd processes.
func TestReopenedPlan(t *testing.T) {
	f := &fakeMinter{}
	d := NewDelivery(t.Context(), f)
	t.Cleanup(d.Close)
	p := reopenAt(t, d, t.TempDir(), []policies.Credential{fileCred("git", ""), envCred("reg", "REG")})
	if env := p.Env(); env != nil {
		t.Errorf("a reopened plan's Env() = %v, want none", env)
	}
	env, err := p.StartEnv(t.Context(), "s1")
	if err != nil || !slices.Equal(env, []string{"REG=tok-s1-reg-1"}) {
		t.Fatalf("StartEnv = %v, %v", env, err)
	}
	if _, refreshed, _ := f.calls(); !slices.Equal(refreshed, []string{"s1/reg"}) {
		t.Errorf("StartEnv re-minted %v, want only the env credential", refreshed)
	}
	if !slices.Equal(p.Env(), env) {
		t.Errorf("Env() after StartEnv = %v, want %v", p.Env(), env)
	}
	if again, _ := p.StartEnv(t.Context(), "s1"); !slices.Equal(again, env) {
		t.Errorf("a second StartEnv = %v, want %v", again, env)
	}
	if _, refreshed, _ := f.calls(); len(refreshed) != 1 {
		t.Errorf("a second StartEnv minted again: %v", refreshed)
	}
}

// TestRefreshersStopOnRevoke: a reopened plan's file credentials are
// re-minted and written at once; Revoke stops the refreshers, and Close
// waits for them.
func TestRefreshersStopOnRevoke(t *testing.T) {
	f := &fakeMinter{}
	d := NewDelivery(context.Background(), f)
	dir := t.TempDir()
	p := reopenAt(t, d, dir, []policies.Credential{fileCred("git", ""), envCred("reg", "REG")})
	p.StartRefreshers(t.Context(), "s1")
	file := filepath.Join(dir, TmpfsDir, "0", "git")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && string(b) == "tok-s1-git-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the re-minted file credential was not written")
		}
	}
	if _, refreshed, _ := f.calls(); !slices.Equal(refreshed, []string{"s1/git"}) {
		t.Errorf("refreshed %v, want the file credential only", refreshed)
	}
	d.Revoke(t.Context(), "s1")
	if _, _, revoked := f.calls(); !slices.Equal(revoked, []string{"s1"}) {
		t.Errorf("revoked %v", revoked)
	}
	d.mu.Lock()
	left := len(d.cancel)
	d.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions' refreshers still registered after Revoke", left)
	}
	// Revoke alone ends them; Close is not needed for that.
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a refresher kept running after Revoke")
	}
	d.Close()
}

// TestGatewayCredential: a credential delivered to the gateway is minted
// and refreshed into the plan's sink, and written nowhere in the sandbox:
// no file, no environment, no mount.
func TestGatewayCredential(t *testing.T) {
	f := &fakeMinter{}
	d := NewDelivery(context.Background(), f)
	t.Cleanup(d.Close)
	dir := t.TempDir()
	gw := policies.Credential{Name: "api", Issuer: "airlock", Audience: "a.test", Scopes: []string{"x"}, Deliver: policies.DeliverGateway}
	p := reopenAt(t, d, dir, []policies.Credential{gw})
	var mu sync.Mutex
	var got []string
	p.OnGateway(func(name string, tok []byte) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, name+"="+string(tok))
	})
	if err := p.Mint(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Equal(got, []string{"api=tok-s1-api-1"}) {
		t.Errorf("sink got %v after Mint", got)
	}
	mu.Unlock()
	if env := p.Env(); len(env) != 0 {
		t.Errorf("Env() = %v; a gateway credential is not in the environment", env)
	}
	if len(p.dirs) != 0 {
		t.Errorf("credential directories %v for a gateway credential", p.dirs)
	}
	if err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), "tok-s1-api") {
				t.Errorf("%s holds the gateway credential", path)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A restarted daemon's plan re-mints it into the sink.
	p2 := reopenAt(t, d, dir, []policies.Credential{gw})
	p2.OnGateway(func(name string, tok []byte) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, name+"="+string(tok))
	})
	p2.StartRefreshers(t.Context(), "s2")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reopened plan's gateway credential was not re-minted: %v", got)
		}
	}
	if _, refreshed, _ := f.calls(); !slices.Equal(refreshed, []string{"s2/api"}) {
		t.Errorf("refreshed %v", refreshed)
	}
	d.Revoke(t.Context(), "s2")
}
