package credentials

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/policies"
)

// flakyIssuer issues until down is set.
type flakyIssuer struct{ down atomic.Bool }

func (f *flakyIssuer) Issue(_ context.Context, req IssueRequest) (*Credential, error) {
	if f.down.Load() {
		return nil, errors.New("issuer unreachable")
	}
	return &Credential{Name: req.Name, Token: token.Secret("ext-" + req.Name + "-" + strings.Join(req.Scopes, ",")),
		ID: "ext-" + req.Name, Expiry: time.Now().Add(time.Hour)}, nil
}

// TestAttackReconcileFailsOpen: a revision narrowed the built-in "git"
// credential (refs/heads/* -> refs/heads/alex/*) and changed an external
// one; the daemon recorded it and died before revising the credentials.
// On re-adopt, Reconcile re-mints both at once, all or nothing; the
// external issuer is down for a moment, so nothing changes: the broker
// keeps the wide grant, which the refreshers then re-mint for the rest of
// the session (Reconcile runs only at re-adopt). The withdrawn authority
// outlives the revision because an unrelated issuer failed once.
func TestAttackReconcileFailsOpen(t *testing.T) {
	ext := &flakyIssuer{}
	h := newHarness(t, WithIssuer("ext", ext))
	wide := Request{Name: "git", Audience: "git.corp.test", Scopes: []string{"git.push repo=app ref=refs/heads/*"}}
	kube := Request{Name: "kube", Issuer: "ext", Audience: "kube.corp.test", Scopes: []string{"kube.get ns=dev"}}
	if _, err := h.broker.Mint(h.ctx, "s-1", []Request{wide, kube}); err != nil {
		t.Fatal(err)
	}
	narrow := wide
	narrow.Scopes = []string{"git.push repo=app ref=refs/heads/alex/*"}
	kube2 := kube
	kube2.Scopes = []string{"kube.get ns=dev", "kube.list ns=dev"}
	gw := func(r Request) policies.Credential {
		return policies.Credential{Name: r.Name, Issuer: r.Issuer, Audience: r.Audience, Scopes: r.Scopes, Deliver: policies.DeliverGateway}
	}
	revised := []policies.Credential{gw(narrow), gw(kube2)}

	d := NewDelivery(t.Context(), h.broker)
	p := d.Reopen(t.TempDir(), revised, 1000, 1000, nil)
	p.OnGateway(func(string, []byte) {})
	ext.down.Store(true)
	_, err := p.Reconcile(h.ctx, "s-1")
	t.Logf("reconcile: %v", err)
	if g := h.broker.Grants("s-1")["git"]; !slices.Equal(g.Scopes, narrow.Scopes) {
		t.Errorf("after a failed reconcile the broker still grants git %q, which the recorded policy narrowed to %q", g.Scopes, narrow.Scopes)
		if c, err := h.broker.Refresh(h.ctx, "s-1", "git"); err == nil {
			t.Errorf("the refresher re-mints it: %v", h.broker.Introspect(h.ctx, c.Token.Reveal()))
		}
	}
}
