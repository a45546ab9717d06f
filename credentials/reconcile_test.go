package credentials

import (
	"slices"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestReconcileAfterCrash: a daemon died after recording a revision of a
// session's credentials and before revising them. The plan reopened under
// the revised policy reconciles the broker's grants: the narrowed
// credential is re-minted and its old token revoked, the unchanged one
// keeps its token, the added one is minted, the removed one's token is
// revoked; the new tokens reach the gateway. Reconciling again does
// nothing.
func TestReconcileAfterCrash(t *testing.T) {
	h := newHarness(t)
	wide := Request{Name: "git", Audience: "git.corp.test", Scopes: []string{"git.push repo=app ref=refs/heads/*"}}
	gone := Request{Name: "old", Audience: "old.corp.test", Scopes: []string{"objects.get bucket=old"}}
	// Granted as a plan delivering them through the gateway grants them.
	jobs := jobsReq
	for _, r := range []*Request{&wide, &jobs, &gone} {
		r.Delivery = "gateway"
	}
	before, err := h.broker.Mint(h.ctx, "s-1", []Request{wide, jobs, gone})
	if err != nil {
		t.Fatal(err)
	}
	gw := func(r Request) policies.Credential {
		return policies.Credential{Name: r.Name, Issuer: "airlock", Audience: r.Audience, Scopes: r.Scopes, Deliver: policies.DeliverGateway}
	}
	narrow := wide
	narrow.Scopes = []string{"git.push repo=app ref=refs/heads/alex/*"}
	added := Request{Name: "kube", Audience: "kube.corp.test", Scopes: []string{"kube.get ns=dev"}}
	revised := []policies.Credential{gw(narrow), gw(jobsReq), gw(added)}

	d := NewDelivery(t.Context(), h.broker)
	p := d.Reopen(t.TempDir(), revised, 1000, 1000, nil)
	var mu sync.Mutex
	got := map[string]string{}
	p.OnGateway(func(name string, tok []byte) {
		mu.Lock()
		defer mu.Unlock()
		got[name] = string(tok)
	})
	rev, err := p.Reconcile(h.ctx, "s-1")
	if err != nil {
		t.Fatal(err)
	}
	if rev == nil || len(rev.Reminted) != 1 || rev.Reminted[0].Name != "git" || len(rev.Added) != 1 || rev.Added[0].Name != "kube" {
		t.Fatalf("reconcile: %+v", rev)
	}
	for _, c := range []*Credential{before[0], before[2]} {
		if h.broker.Introspect(h.ctx, c.Token.Reveal()).Active {
			t.Errorf("%s's token from before the revision is live", c.Name)
		}
	}
	if !h.broker.Introspect(h.ctx, before[1].Token.Reveal()).Active || h.broker.Live("s-1")["jobs"] != before[1].ID {
		t.Error("the unchanged credential lost its token")
	}
	grants := h.broker.Grants("s-1")
	if _, ok := grants["old"]; ok || !slices.Equal(grants["git"].Scopes, narrow.Scopes) || grants["kube"].Audience != "kube.corp.test" {
		t.Errorf("grants after reconcile: %+v", grants)
	}
	mu.Lock()
	if got["git"] == "" || got["kube"] == "" || !h.broker.Introspect(h.ctx, got["git"]).Active {
		t.Errorf("gateway tokens: %v", got)
	}
	mu.Unlock()
	if rev, err := p.Reconcile(h.ctx, "s-1"); rev != nil || err != nil {
		t.Errorf("reconcile again: %+v, %v; want nothing to do", rev, err)
	}
}
