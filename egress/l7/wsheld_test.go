package l7

import (
	"testing"
	"time"
)

// An attacker's review found the messages a client's stream holds
// (c.msgs) unbounded, their release quadratic, and every empty message
// lengthening a hold: 600 KB of empty messages behind a held tail kept
// 100,000 messages and took 3.5 s of a core to release under c.mu.

// emptyMsgs is the wire of n empty, final, masked text messages: six
// bytes each.
func emptyMsgs(n int) []byte {
	var b []byte
	for range n {
		b = appendWSClientFrame(b, text(""), true)
	}
	return b
}

// TestWSHeldMessagesBounded: a message ending in the start of a
// placeholder holds its tail; empty messages after it wait behind it, up
// to wsMaxHeldMessages, then the websocket is ended (1008) with nothing
// held; they do not lengthen the hold, and messages up to the bound are
// released in linear time.
func TestWSHeldMessagesBounded(t *testing.T) {
	c, _ := newTestWSScan(guardedSecrets())
	c.mu.Lock()
	c.hold = 250 * time.Millisecond // the real hold
	c.mu.Unlock()
	if _, err := c.Write(appendWSClientFrame(nil, text("x "+testPlaceholder[:20]), true)); err != nil {
		t.Fatal(err)
	}
	// Up to the bound: kept, and they do not lengthen the hold.
	began := time.Now()
	if _, err := c.Write(emptyMsgs(wsMaxHeldMessages - 10)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	held, gen := len(c.msgs), c.gen
	c.mu.Unlock()
	if held == 0 || held > wsMaxHeldMessages {
		t.Fatalf("%d messages held, want some and at most %d", held, wsMaxHeldMessages)
	}
	for range 3 {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write(emptyMsgs(1)); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	if c.gen != gen {
		t.Errorf("empty messages lengthened the hold (gen %d -> %d)", gen, c.gen)
	}
	c.mu.Unlock()
	deadline := began.Add(5 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.msgs)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still held 5 s after the hold began (250 ms)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Past the bound: the websocket is ended, and what it kept goes.
	c2, _ := newTestWSScan(guardedSecrets())
	if _, err := c2.Write(appendWSClientFrame(nil, text("x "+testPlaceholder[:20]), true)); err != nil {
		t.Fatal(err)
	}
	const n = 100_000 // 600 KB of wire
	wire := emptyMsgs(n)
	var werr error
	start := time.Now()
	for off := 0; off < len(wire) && werr == nil; off += 32 << 10 {
		_, werr = c2.Write(wire[off:min(off+32<<10, len(wire))])
	}
	if werr == nil {
		t.Errorf("%d empty messages behind a held tail were all taken", n)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("refusing the stream took %s", d)
	}
	c2.mu.Lock()
	if len(c2.msgs) > wsMaxHeldMessages {
		t.Errorf("%d messages kept, over %d", len(c2.msgs), wsMaxHeldMessages)
	}
	c2.mu.Unlock()
	c.Close()
	c2.Close()
}
