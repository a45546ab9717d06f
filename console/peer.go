package console

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/containerd/errdefs"
)

// Peer is the user at the other end of a unix socket connection, as its
// credentials (SO_PEERCRED) showed when it connected.
type Peer struct {
	UID, GID uint32
}

// Name is "alice (uid 1000)", or "uid 1000" for a uid without a name.
func (p Peer) Name() string {
	name := fmt.Sprintf("uid %d", p.UID)
	if u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10)); err == nil && u.Username != "" {
		name = u.Username + " (" + name + ")"
	}
	return name
}

type peerKey struct{}

// connContext records the peer of a unix socket connection (the
// http.Server's ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if p, ok := peerOf(c); ok {
		return context.WithValue(ctx, peerKey{}, p)
	}
	return ctx
}

// peerFrom returns the connection's peer, if it is a unix socket's.
func peerFrom(ctx context.Context) (Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(Peer)
	return p, ok
}

// allowPeer admits root, airlockd's own user, and members of group gid
// (primary or supplementary; gid < 0: no group).
func allowPeer(p Peer, gid int) error {
	if p.UID == 0 || int(p.UID) == os.Geteuid() {
		return nil
	}
	if gid >= 0 {
		if int(p.GID) == gid {
			return nil
		}
		if u, err := user.LookupId(strconv.FormatUint(uint64(p.UID), 10)); err == nil {
			if ids, err := u.GroupIds(); err == nil && slices.Contains(ids, strconv.Itoa(gid)) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is neither root nor a member of the API socket's group: %w", p.Name(), errdefs.ErrPermissionDenied)
}
