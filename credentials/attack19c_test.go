package credentials

import (
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackReconcileKeepsMovedCredential: a revision moves the built-in
// "git" credential from a file in the sandbox to the gateway (the sandbox
// is no longer to hold the raw token): policies.Diff calls it Changed, so
// Revise re-mints it and revokes the file token. The daemon records the
// revision and dies before revising the credentials. On re-adopt,
// Reconcile compares only the broker's grant (issuer, audience, scopes,
// ttl), which the move did not touch: it calls the credential Kept, so the
// raw token the sandbox holds (the file, or any copy it made) stays
// active until it expires, and nothing says so.
func TestAttackReconcileKeepsMovedCredential(t *testing.T) {
	h := newHarness(t)
	req := Request{Name: "git", Audience: "git.corp.test", Scopes: []string{"git.push repo=app ref=refs/heads/*"}}
	minted, err := h.broker.Mint(h.ctx, "s-1", []Request{req})
	if err != nil {
		t.Fatal(err)
	}
	fileTok := minted[0].Token.Reveal()
	if !h.broker.Introspect(h.ctx, fileTok).Active {
		t.Fatal("control: the file token is not active")
	}
	file := policies.Credential{Name: "git", Audience: req.Audience, Scopes: req.Scopes}
	moved := file
	moved.Deliver = policies.DeliverGateway
	rv := policies.Diff(&policies.Policy{Credentials: []policies.Credential{file}}, &policies.Policy{Credentials: []policies.Credential{moved}})
	if len(rv.Credentials.Changed) != 1 {
		t.Fatalf("control: the revision does not change git: %+v", rv.Credentials)
	}

	d := NewDelivery(t.Context(), h.broker)
	p := d.Reopen(t.TempDir(), []policies.Credential{moved}, 1000, 1000, nil)
	p.OnGateway(func(string, []byte) {})
	rev, err := p.Reconcile(h.ctx, "s-1")
	t.Logf("reconcile: %+v, %v", rev, err)
	if h.broker.Introspect(h.ctx, fileTok).Active {
		t.Errorf("after reconcile the token the sandbox held as a file stays active, though the recorded revision moved git to the gateway (a Changed credential, whose tokens a revision revokes)")
	}
}
