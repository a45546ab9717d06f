package nft_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// connIn returns an nftables connection to a fresh network namespace.
func connIn(t *testing.T) *nftables.Conn {
	t.Helper()
	testutil.RequiresRoot(t)
	name := "nfttest-" + rand.Text()[:8]
	path, err := netns.Create(netns.DefaultDir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Remove(path); err != nil {
			t.Error(err)
		}
	})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseLasting() })
	return c
}

func TestInstallKernel(t *testing.T) {
	t.Parallel()
	c := connIn(t)
	base := nft.Base{
		Table: "al" + hex.EncodeToString([]byte{1, 2}), SessionIfacePrefix: "s-", Uplink: "uplink", DNSPort: 53,
		Never: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16"), netip.MustParsePrefix("10.215.0.0/30")},
	}
	if err := nft.Install(c, base); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("install: %v", err)
	}
	if err := nft.Check(c, base.Table); err != nil {
		t.Fatal(err)
	}
	if err := nft.Install(c, base); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err == nil {
		t.Error("second install of the same table succeeded; want an error")
	}
	// A table that has its L7 chain is left as it is.
	if err := nft.EnsureL7(c, base); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("EnsureL7 on a complete table: %v", err)
	}
	// A table from before the guard chain gains it, once.
	guard := &nftables.Chain{Name: nft.ChainGuard, Table: &nftables.Table{Name: base.Table, Family: nftables.TableFamilyINet}}
	c.FlushChain(guard)
	c.DelChain(guard)
	if err := c.Flush(); err != nil {
		t.Fatalf("delete the guard chain: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := nft.EnsureGuard(c, base); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("EnsureGuard #%d: %v", i+1, err)
		}
		if rules, err := c.GetRules(guard.Table, guard); err != nil || len(rules) != 1 {
			t.Fatalf("guard chain after EnsureGuard #%d: %d rules, %v; want 1", i+1, len(rules), err)
		}
	}

	sessions := []nft.Session{
		{Name: "s-aaaa", Addr4: netip.MustParseAddr("10.213.0.3")},
		{
			Name: "s-bbbb", Addr4: netip.MustParseAddr("10.213.0.5"), Addr6: netip.MustParseAddr("fd0a:213::5"), Drop: true,
			Allow:   []nft.Rule{{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Port: 443}, {Prefix: netip.MustParsePrefix("2001:db8::/32")}},
			Deny:    []nft.Rule{{Prefix: netip.MustParsePrefix("192.0.2.7/32")}},
			L7Ports: []uint16{80, 443},
		},
	}
	for _, s := range sessions {
		if err := nft.AddSession(c, base.Table, base, s); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("add session %s: %v", s.Name, err)
		}
	}
	all, complete, err := nft.Sessions(c, base.Table)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"s-aaaa", "s-bbbb"}; !slices.Equal(all, want) || !complete["s-aaaa"] || !complete["s-bbbb"] {
		t.Fatalf("Sessions = %v %v, want %v complete", all, complete, want)
	}

	x := netip.MustParseAddr("10.214.0.10")
	x6 := netip.MustParseAddr("fd0a:214::10")
	ttl := 2 * time.Second
	if err := nft.Pin(c, base.Table, "s-bbbb", []nft.Pinning{
		{Addr: x, Port: 80, Expires: ttl}, {Addr: x, Port: 443, Expires: ttl},
		{Addr: x6, Port: 80, Expires: ttl}, {Addr: x6, Port: 443, Expires: ttl},
		{Addr: x, Expires: ttl},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("pin: %v", err)
	}
	// Pinning again with a longer lifetime extends the element.
	if err := nft.Pin(c, base.Table, "s-bbbb", []nft.Pinning{{Addr: x, Port: 80, Expires: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("re-pin: %v", err)
	}
	pins, err := nft.Pinned(c, base.Table, "s-bbbb")
	if err != nil {
		t.Fatal(err)
	}
	if len(pins) != 5 {
		t.Fatalf("Pinned = %v, want 5 entries", pins)
	}
	for _, p := range pins {
		long := p.Addr == x && p.Port == 80
		if long && p.Expires < 50*time.Minute || !long && (p.Expires > 2*time.Second || p.Expires <= 0) {
			t.Errorf("pin %v:%d expires in %v", p.Addr, p.Port, p.Expires)
		}
	}
	if pins, _ := nft.Pinned(c, base.Table, "s-aaaa"); len(pins) != 0 {
		t.Errorf("session s-aaaa sees pins %v of s-bbbb", pins)
	}
	st, err := nft.Drops(c, base.Table, "s-aaaa")
	if err != nil {
		t.Fatal(err)
	}
	if st.Packets != 0 || len(st.Dests) != 0 {
		t.Errorf("Drops of an idle session = %+v", st)
	}

	if err := nft.DeleteSession(c, base.Table, "s-bbbb"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete session: %v", err)
	}
	// Deleting again finds nothing to delete and succeeds.
	if err := nft.DeleteSession(c, base.Table, "s-bbbb"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete session twice: %v", err)
	}
	all, _, err = nft.Sessions(c, base.Table)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(all, []string{"s-aaaa"}) {
		t.Errorf("after delete, Sessions = %v", all)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if len(ch.Name) > 6 && ch.Name[:6] == "s-bbbb" {
			t.Errorf("chain %s left behind", ch.Name)
		}
	}
	sets, err := c.GetSets(&nftables.Table{Name: base.Table, Family: nftables.TableFamilyINet})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		if len(s.Name) > 6 && s.Name[:6] == "s-bbbb" {
			t.Errorf("set %s left behind", s.Name)
		}
	}

	if err := nft.DeleteTable(c, base.Table); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if left, err := nft.TablesWithPrefix(c, base.Table); err != nil || len(left) != 0 {
		t.Errorf("tables left: %v %v", left, err)
	}
}

func TestInstallHostKernel(t *testing.T) {
	t.Parallel()
	c := connIn(t)
	h := nft.Host{Table: "al0102-host", Peer: "al0102-up", Net: netip.MustParsePrefix("10.215.0.0/30")}
	if err := nft.InstallHost(c, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("install host table: %v", err)
	}
	if left, err := nft.TablesWithPrefix(c, "al0102"); err != nil || !slices.Equal(left, []string{"al0102-host"}) {
		t.Errorf("TablesWithPrefix = %v %v", left, err)
	}
}
