package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestUpdateCredentialsLive revises a running session's credentials: a
// narrowed credential's old token fails verification at once and the new
// one, read from its file in the sandbox, works within the narrowed
// scopes; an unchanged credential keeps its token (same jti); an added one
// appears; a removed file credential's file disappears and its token is
// revoked, as is a removed env credential's, which processes exec'd later
// no longer get. A revision refused for another field changes no
// credential. After a daemon restart the revised credentials hold, in the
// directories the sandbox was made with, and are refreshed.
func TestUpdateCredentialsLive(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	// The verification endpoints of the daemon of the moment, across
	// the restart.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Daemon.CredentialsHandler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	v := verify.ForIssuer(srv.URL)
	const aud = "jobs.world.test"
	cred := func(name string, scopes ...string) policies.Credential {
		return policies.Credential{Name: name, Issuer: "airlock", Audience: aud, Scopes: scopes, TTL: policies.Duration(5 * time.Minute)}
	}
	wide, narrowed := "jobs.cancel owner=alex", "jobs.cancel owner=alex queue=dev"
	drop := cred("drop", wide)
	drop.Path = "/run/airlock/tokens/drop"
	envdrop := cred("envdrop", wide)
	envdrop.Deliver, envdrop.EnvVar = policies.DeliverEnv, "ENVDROP"
	p := policy("sleep", "600")
	p.Credentials = []policies.Credential{drop, cred("narrow", wide), cred("keep", narrowed), envdrop}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	read := func(file string) string {
		t.Helper()
		out, code := execOut(t, s.ID, "cat", file)
		if code != 0 || strings.Count(out, ".") != 2 {
			t.Fatalf("read %s: exit %d %q", file, code, out)
		}
		return out
	}
	jti := func(tok string) string {
		t.Helper()
		c, err := v.Verify(ctx, tok, aud)
		if err != nil {
			t.Fatalf("token does not verify: %v", err)
		}
		return c.ID
	}
	cancel := func(tok, queue string) error {
		_, err := v.Authorize(ctx, tok, aud, scope.Request{Action: "jobs.cancel",
			Attrs: map[string]string{"owner": "alex", "queue": queue, "id": "job-1", "name": "x"}})
		return err
	}
	revoked := func(what, tok string) {
		t.Helper()
		if _, err := v.Verify(ctx, tok, aud); !errors.Is(err, verify.ErrRevoked) {
			t.Errorf("%s: %v, want revoked", what, err)
		}
	}
	dir := policies.CredentialDir + "/"
	oldNarrow, oldKeep, oldDrop := read(dir+"narrow"), read(dir+"keep"), read(drop.Path)
	oldEnv, _ := execOut(t, s.ID, "sh", "-c", `printf %s "$ENVDROP"`)
	if err := cancel(oldNarrow, "prod"); err != nil {
		t.Fatalf("before the revision, the wide token: %v", err)
	}
	keepID, dropID, envID, narrowID := jti(oldKeep), jti(oldDrop), jti(oldEnv), jti(oldNarrow)

	// A refused revision (the image, and a credential narrowed with it)
	// changes no credential.
	bad := p
	bad.Image = "airlock/other:latest"
	bad.Credentials = []policies.Credential{drop, cred("narrow", narrowed), cred("keep", narrowed), envdrop}
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: bad}); err == nil || !errdefs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), "image: cannot change") {
		t.Fatalf("update changing the image: %v, want it refused", err)
	}
	// So does one adding an env credential.
	bad = p
	extra := envdrop
	extra.Name, extra.EnvVar = "envnew", "ENVNEW"
	bad.Credentials = append(slices.Clone(p.Credentials), extra)
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: bad}); err == nil || !errdefs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), "credential.envnew: "+policies.ReasonEnvCredential) {
		t.Fatalf("update adding an env credential: %v, want it refused", err)
	}
	if got := read(dir + "narrow"); got != oldNarrow || jti(got) != narrowID || cancel(got, "prod") != nil {
		t.Error("a refused revision changed the credential it would have narrowed")
	}
	if got, _ := h.Daemon.Inspect(ctx, s.ID); got.PolicyVersion != 1 {
		t.Errorf("after refused revisions: version %d", got.PolicyVersion)
	}

	// The revision: narrow narrowed, keep kept, drop and envdrop removed,
	// added added (in the directory drop used).
	added := cred("added", narrowed)
	added.Path = "/run/airlock/tokens/added"
	revised := policy("sleep", "600")
	revised.Credentials = []policies.Credential{cred("narrow", narrowed), cred("keep", narrowed), added}
	up, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	// At once: the old token of the narrowed credential is revoked.
	revoked("the narrowed credential's old token", oldNarrow)
	newNarrow := read(dir + "narrow")
	if newNarrow == oldNarrow {
		t.Fatal("the narrowed credential's file still holds the old token")
	}
	if err := cancel(newNarrow, "dev"); err != nil {
		t.Errorf("the re-minted token, in scope: %v", err)
	}
	if err := cancel(newNarrow, "prod"); !errors.Is(err, verify.ErrScopeDenied) {
		t.Errorf("the re-minted token, out of the narrowed scope: %v, want scope denied", err)
	}
	if got := read(dir + "keep"); got != oldKeep || jti(got) != keepID {
		t.Error("the unchanged credential's token changed")
	}
	revoked("the removed file credential's token", oldDrop)
	revoked("the removed env credential's token", oldEnv)
	if out, code := execOut(t, s.ID, "test", "-e", drop.Path); code == 0 {
		t.Errorf("the removed credential's file is still there %q", out)
	}
	if out, _ := execOut(t, s.ID, "sh", "-c", `printf %s "$ENVDROP"`); out != "" {
		t.Errorf("a process exec'd after the revision got the removed env credential")
	}
	addedTok := read(added.Path)
	if err := cancel(addedTok, "dev"); err != nil {
		t.Errorf("the added credential: %v", err)
	}

	r := up.Revision
	if r == nil || r.Version != 2 || up.PolicyVersion != 2 || r.Credentials == nil {
		t.Fatalf("revision %+v", r)
	}
	c := r.Credentials
	tok := func(name, id string) api.CredentialToken { return api.CredentialToken{Name: name, ID: id} }
	if !slices.Equal(c.Reminted, []api.CredentialToken{tok("narrow", jti(newNarrow))}) ||
		!slices.Equal(c.Added, []api.CredentialToken{tok("added", jti(addedTok))}) ||
		!slices.Equal(c.Kept, []api.CredentialToken{tok("keep", keepID)}) ||
		!slices.Equal(c.Removed, []string{"drop", "envdrop"}) || r.CredentialsReminted != 2 {
		t.Errorf("credential revision %+v (%d re-minted)", c, r.CredentialsReminted)
	}
	for _, want := range []api.CredentialToken{tok("drop", dropID), tok("envdrop", envID), tok("narrow", narrowID)} {
		if !slices.Contains(c.Revoked, want) {
			t.Errorf("revoked %v, want %v among them", c.Revoked, want)
		}
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var ev *api.AuditEvent
	for i := range evs {
		if evs[i].Layer == "policy" && evs[i].Action == "revised" {
			ev = &evs[i]
		}
	}
	if ev == nil || ev.PolicyVersion != 2 || ev.Subject != "credentials" || ev.Fields["credentials_reminted"] != float64(2) ||
		!strings.Contains(fmtJSON(t, ev.Fields["credentials"]), jti(newNarrow)) {
		t.Errorf("revision event %+v", ev)
	}
	raw := readFile(t, filepath.Join(h.Root, "sessions", s.ID, "audit.jsonl"))
	for _, tk := range []string{oldNarrow, newNarrow, oldKeep, addedTok, oldEnv} {
		if strings.Contains(raw, tk) || strings.Contains(h.Log.String(), tk) {
			t.Error("a token reached the audit log or the daemon log")
		}
	}

	// A restarted daemon re-adopts the revised credentials: re-minted
	// (its previous tokens are not known to it) under the revised
	// scopes, in the directories the sandbox was made with, though the
	// revised policy lists them in another order.
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var after string
	poll(t, "the narrowed credential is re-minted after the restart", func() bool {
		after = read(dir + "narrow")
		return after != newNarrow
	})
	if err := cancel(after, "dev"); err != nil {
		t.Errorf("after the restart, the narrowed credential: %v", err)
	}
	if err := cancel(after, "prod"); !errors.Is(err, verify.ErrScopeDenied) {
		t.Errorf("after the restart, out of the narrowed scope: %v, want scope denied", err)
	}
	poll(t, "the added credential is re-minted after the restart", func() bool { return read(added.Path) != addedTok })
	if err := cancel(read(added.Path), "dev"); err != nil {
		t.Errorf("after the restart, the added credential: %v", err)
	}
	for _, f := range []string{"/run/airlock/tokens/narrow", dir + "added", drop.Path} {
		if out, code := execOut(t, s.ID, "test", "-e", f); code == 0 {
			t.Errorf("after the restart, %s exists %q", f, out)
		}
	}
	revoked("after the restart, the narrowed credential's first token", oldNarrow)
	revoked("after the restart, the removed credential's token", oldDrop)
	if got, _ := h.Daemon.Inspect(ctx, s.ID); got.PolicyVersion != 2 || len(got.Policy.Credentials) != 3 {
		t.Errorf("after the restart: version %d, credentials %+v", got.PolicyVersion, got.Policy.Credentials)
	}

	// A revision after the restart removes the credential kept so far.
	keepNow := read(dir + "keep")
	third := policy("sleep", "600")
	third.Credentials = []policies.Credential{cred("narrow", narrowed), added}
	up, err = h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: third})
	if err != nil {
		t.Fatal(err)
	}
	if up.PolicyVersion != 3 || !slices.Equal(up.Revision.Credentials.Removed, []string{"keep"}) || up.Revision.CredentialsReminted != 0 {
		t.Errorf("revision after the restart: %+v", up.Revision)
	}
	revoked("the credential removed after the restart", keepNow)
	if _, code := execOut(t, s.ID, "test", "-e", dir+"keep"); code == 0 {
		t.Error("the credential removed after the restart left its file")
	}
	if err := cancel(read(dir+"narrow"), "dev"); err != nil {
		t.Errorf("a kept credential after the third revision: %v", err)
	}
}

func fmtJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCredentialRevisionAppliedAfterCrash: the daemon records a revision
// before it revises the credentials. A daemon that dies in between
// (reproduced by writing the record as Update writes it, then restarting)
// brings the broker's grants in line with the recorded policy when it
// re-adopts the session: the narrowed credential's old token fails at once
// and the one in the sandbox's file carries the narrowed scopes, the
// removed credential's token is revoked, and the reconciliation is an
// audit event.
func TestCredentialRevisionAppliedAfterCrash(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Daemon.CredentialsHandler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	v := verify.ForIssuer(srv.URL)
	const aud = "jobs.world.test"
	cred := func(name string, scopes ...string) policies.Credential {
		return policies.Credential{Name: name, Issuer: "airlock", Audience: aud, Scopes: scopes, TTL: policies.Duration(5 * time.Minute)}
	}
	wide, narrowed := "jobs.cancel owner=alex", "jobs.cancel owner=alex queue=dev"
	p := policy("sleep", "600")
	p.Credentials = []policies.Credential{cred("narrow", wide), cred("drop", wide)}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	read := func(file string) string {
		t.Helper()
		out, code := execOut(t, s.ID, "cat", file)
		if code != 0 || strings.Count(out, ".") != 2 {
			t.Fatalf("read %s: exit %d %q", file, code, out)
		}
		return out
	}
	cancel := func(tok, queue string) error {
		_, err := v.Authorize(ctx, tok, aud, scope.Request{Action: "jobs.cancel",
			Attrs: map[string]string{"owner": "alex", "queue": queue, "id": "job-1", "name": "x"}})
		return err
	}
	oldNarrow, oldDrop := read("/run/airlock/credentials/narrow"), read("/run/airlock/credentials/drop")
	if err := cancel(oldNarrow, "prod"); err != nil {
		t.Fatalf("before: %v", err)
	}

	// What Daemon.Update has written when it dies before revising the
	// credentials.
	path := filepath.Join(h.Root, "sessions", s.ID, "session.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	revised := p.Clone()
	revised.Credentials = []policies.Credential{cred("narrow", narrowed)}
	pb, _ := json.Marshal(revised)
	var pol map[string]any
	_ = json.Unmarshal(pb, &pol)
	rec["policy"].(map[string]any)["credentials"] = pol["credentials"]
	rec["policy_version"] = 2
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	for name, tok := range map[string]string{"narrow": oldNarrow, "drop": oldDrop} {
		if _, err := v.Verify(ctx, tok, aud); err == nil {
			t.Errorf("%s's token from before the revision still verifies after the restart", name)
		}
	}
	var now string
	poll(t, "the narrowed token is delivered", func() bool {
		out, code := execOut(t, s.ID, "cat", "/run/airlock/credentials/narrow")
		now = out
		return code == 0 && out != oldNarrow && strings.Count(out, ".") == 2
	})
	if err := cancel(now, "dev"); err != nil {
		t.Errorf("the re-minted token within its scopes: %v", err)
	}
	if err := cancel(now, "prod"); err == nil {
		t.Error("the re-minted token still cancels in queue prod: the withdrawn scope")
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(ev api.AuditEvent) bool {
		return ev.Layer == "policy" && ev.Action == "reconciled" && ev.Subject == "credentials" && ev.PolicyVersion == 2
	}) {
		t.Error("no policy/reconciled audit event")
	}
}
