package credentials

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
)

// TestRefreshUnderReplacedGrantIsRevoked: a refresh issued under a grant
// that a revision then re-minted is refused and its token recorded
// revoked, also when the revision asked for the same request (it changed
// only how the token is delivered: a path, or file to gateway). Before
// grants had a generation, such a late refresh passed as current and its
// token stayed live after the revision.
func TestRefreshUnderReplacedGrantIsRevoked(t *testing.T) {
	h := newHarness(t)
	h.mint(t, "s-1", gitReq)
	old := h.broker.Grants("s-1")["git"]
	late, err := h.broker.issue(h.ctx, "s-1", old)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.broker.Revise(h.ctx, "s-1", []Request{gitReq}, nil, "revision"); err != nil {
		t.Fatal(err)
	}
	if err := h.broker.commit("s-1", old, late, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refresh under the replaced grant committed: %v", err)
	}
	if h.broker.Introspect(h.ctx, late.Token.Reveal()).Active {
		t.Errorf("token %s refreshed under the replaced grant is live after the revision", late.ID)
	}
	// A refresh under the current grant still works.
	if _, err := h.broker.Refresh(h.ctx, "s-1", "git"); err != nil {
		t.Errorf("refresh under the current grant: %v", err)
	}
}
