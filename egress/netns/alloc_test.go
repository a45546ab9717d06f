package netns

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/containerd/errdefs"
)

func TestAllocatorAddrs(t *testing.T) {
	a := newAllocator(DefaultPool, DefaultPool6)
	tests := []struct {
		idx              uint32
		gw4, s4, gw6, s6 string
	}{
		{1, "10.213.0.2", "10.213.0.3", "fd0a:213::2", "fd0a:213::3"},
		{2, "10.213.0.4", "10.213.0.5", "fd0a:213::4", "fd0a:213::5"},
		{128, "10.213.1.0", "10.213.1.1", "fd0a:213::100", "fd0a:213::101"},
		{32767, "10.213.255.254", "10.213.255.255", "fd0a:213::fffe", "fd0a:213::ffff"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.idx), func(t *testing.T) {
			got := a.addrs(tt.idx)
			want := sessionAddrs{
				GW4: netip.MustParseAddr(tt.gw4), Session4: netip.MustParseAddr(tt.s4),
				GW6: netip.MustParseAddr(tt.gw6), Session6: netip.MustParseAddr(tt.s6),
			}
			if got != want {
				t.Fatalf("addrs(%d) = %+v, want %+v", tt.idx, got, want)
			}
			if i, ok := a.indexOf(got.GW4); !ok || i != tt.idx {
				t.Errorf("indexOf(%v) = %d, %v; want %d", got.GW4, i, ok, tt.idx)
			}
			if _, ok := a.indexOf(got.Session4); ok {
				t.Errorf("indexOf(%v) matched a session-side address", got.Session4)
			}
		})
	}
	for _, s := range []string{"10.213.0.0", "10.214.0.2", "fd0a:213::2", "10.213.0.1"} {
		if i, ok := a.indexOf(netip.MustParseAddr(s)); ok {
			t.Errorf("indexOf(%s) = %d; want no index", s, i)
		}
	}
}

func TestAllocatorExhaustion(t *testing.T) {
	// A /29 holds indexes 1..3.
	a := newAllocator(netip.MustParsePrefix("10.0.0.0/29"), DefaultPool6)
	got := map[uint32]bool{}
	for i := range 3 {
		idx, err := a.allocate(fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if idx == 0 || got[idx] {
			t.Fatalf("allocate returned %d (seen: %v)", idx, got)
		}
		got[idx] = true
	}
	if _, err := a.allocate("x"); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("allocate on a full pool = %v, want resource exhausted", err)
	}
	a.release(2)
	if idx, err := a.allocate("y"); err != nil || idx != 2 {
		t.Fatalf("allocate after release = %d, %v; want 2", idx, err)
	}
	// The v6 pool can be the smaller one.
	b := newAllocator(DefaultPool, netip.MustParsePrefix("fd00::/125"))
	for range 3 {
		if _, err := b.allocate("k"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.allocate("k"); err == nil {
		t.Fatal("allocate beyond the IPv6 pool succeeded")
	}
}

func TestAllocatorNextFit(t *testing.T) {
	a := newAllocator(DefaultPool, DefaultPool6)
	i1, _ := a.allocate("a")
	a.release(i1)
	i2, _ := a.allocate("b")
	if i2 == i1 {
		t.Errorf("released index %d reused at once", i1)
	}
}

func TestAllocatorReserve(t *testing.T) {
	a := newAllocator(DefaultPool, DefaultPool6)
	if err := a.reserve(7, "k7"); err != nil {
		t.Fatal(err)
	}
	if err := a.reserve(7, "k7"); err != nil {
		t.Errorf("reserving again for the same key: %v", err)
	}
	if err := a.reserve(7, "other"); !errdefs.IsAlreadyExists(err) {
		t.Errorf("reserve of a used index = %v, want already exists", err)
	}
	if err := a.reserve(0, "k"); err == nil {
		t.Error("reserve(0) succeeded")
	}
	if err := a.reserve(1<<20, "k"); err == nil {
		t.Error("reserve outside the pool succeeded")
	}
	if idx, _ := a.allocate("n"); idx <= 7 {
		t.Errorf("allocate after reserve(7) = %d, want a later index", idx)
	}
}

// TestAllocatorRandomOps cycles through allocations and releases in
// pseudo-random order and checks that no index is ever handed out twice.
func TestAllocatorRandomOps(t *testing.T) {
	a := newAllocator(netip.MustParsePrefix("10.0.0.0/26"), DefaultPool6) // 31 usable
	r := rand.New(rand.NewPCG(1, 2))
	live := map[uint32]bool{}
	for range 5000 {
		if r.IntN(3) > 0 {
			idx, err := a.allocate("k")
			if err != nil {
				if len(live) != 31 {
					t.Fatalf("allocate failed with %d live: %v", len(live), err)
				}
				continue
			}
			if live[idx] || idx == 0 || idx >= 32 {
				t.Fatalf("allocate returned %d; live %v", idx, live)
			}
			live[idx] = true
		} else {
			for idx := range live {
				a.release(idx)
				delete(live, idx)
				break
			}
		}
		if a.inUse() != len(live) {
			t.Fatalf("inUse = %d, want %d", a.inUse(), len(live))
		}
	}
}
