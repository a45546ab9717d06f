package netns

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/containerd/errdefs"
)

// sessionAddrs are a session's point-to-point addresses: the gateway side
// of its veth and the session side, a /31 (and a /127 at the same index).
type sessionAddrs struct {
	GW4, Session4 netip.Addr
	GW6, Session6 netip.Addr
}

// allocator hands out session indexes. Index i owns the /31 at
// pool + 2i and the /127 at pool6 + 2i; index 0 is never used, so the
// pool's first address stays free. Nothing is stored on disk: after a
// restart the gateway rebuilds the allocator from the addresses on its
// session interfaces (reserve). Allocation is next-fit, so a released
// address is reused as late as possible.
//
// An allocator is not safe for concurrent use.
type allocator struct {
	pool4, pool6 netip.Prefix
	size         uint32 // indexes 0..size-1
	next         uint32
	used         map[uint32]string
}

func newAllocator(pool4, pool6 netip.Prefix) *allocator {
	size := pairs(pool4)
	if n := pairs(pool6); n < size {
		size = n
	}
	return &allocator{pool4: pool4.Masked(), pool6: pool6.Masked(), size: size, next: 1, used: map[uint32]string{}}
}

// pairs is the number of /31 (/127) pairs in p, capped to fit a uint32.
func pairs(p netip.Prefix) uint32 {
	host := p.Addr().BitLen() - p.Bits() - 1
	if host >= 31 {
		return 1 << 31
	}
	if host < 0 {
		return 0
	}
	return 1 << host
}

// allocate reserves the next free index for key.
func (a *allocator) allocate(key string) (uint32, error) {
	for range a.size {
		i := a.next
		a.next++
		if a.next >= a.size {
			a.next = 1
		}
		if i == 0 {
			continue
		}
		if _, ok := a.used[i]; !ok {
			a.used[i] = key
			return i, nil
		}
	}
	return 0, fmt.Errorf("session pool %v: all %d addresses in use: %w", a.pool4, len(a.used), errdefs.ErrResourceExhausted)
}

// reserve marks index i as used by key, as found on a running gateway.
func (a *allocator) reserve(i uint32, key string) error {
	if i == 0 || i >= a.size {
		return fmt.Errorf("session index %d outside pool %v: %w", i, a.pool4, errdefs.ErrInvalidArgument)
	}
	if k, ok := a.used[i]; ok && k != key {
		return fmt.Errorf("session index %d used by %s and %s: %w", i, k, key, errdefs.ErrAlreadyExists)
	}
	a.used[i] = key
	if i >= a.next {
		a.next = i + 1
		if a.next >= a.size {
			a.next = 1
		}
	}
	return nil
}

func (a *allocator) release(i uint32) { delete(a.used, i) }

func (a *allocator) inUse() int { return len(a.used) }

// addrs returns the addresses of index i.
func (a *allocator) addrs(i uint32) sessionAddrs {
	b4 := a.pool4.Addr().As4()
	v4 := binary.BigEndian.Uint32(b4[:]) + 2*i
	gw4 := netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, v4)))
	gw6 := addUint(a.pool6.Addr(), 2*uint64(i))
	return sessionAddrs{GW4: gw4, Session4: gw4.Next(), GW6: gw6, Session6: gw6.Next()}
}

// indexOf is the inverse of addrs for a gateway-side IPv4 address.
func (a *allocator) indexOf(gw4 netip.Addr) (uint32, bool) {
	if !gw4.Is4() || !a.pool4.Contains(gw4) {
		return 0, false
	}
	b, p := gw4.As4(), a.pool4.Addr().As4()
	d := binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(p[:])
	if d%2 != 0 || d/2 == 0 || d/2 >= a.size {
		return 0, false
	}
	return d / 2, true
}

func addUint(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	lo := binary.BigEndian.Uint64(b[8:])
	hi := binary.BigEndian.Uint64(b[:8])
	sum := lo + n
	if sum < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], sum)
	return netip.AddrFrom16(b)
}
