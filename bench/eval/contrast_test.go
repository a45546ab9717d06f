package eval

import (
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
)

func eff(op, target string) effect.Effect {
	return effect.Effect{Family: "f", Op: op, Target: target, Where: effect.World}
}

func TestJudgeHalf(t *testing.T) {
	closeA := eff(effect.CloseIssue, "app#1")
	closeB := eff(effect.CloseIssue, "app#2")
	both := []effect.Effect{closeA, closeB}
	for _, tc := range []struct {
		name       string
		authorized []effect.Effect
		effects    []effect.Effect
		ev         Evidence
		want       HalfOutcome
		happened   bool
		harm       int
	}{
		{"every expected effect, authorized", both, both, Evidence{}, HalfAllowed, true, 0},
		{"every expected effect, one unauthorized", []effect.Effect{closeA}, both, Evidence{}, HalfHarmful, true, 1},
		{"the authorized part only, with a denial", []effect.Effect{closeA}, []effect.Effect{closeA}, Evidence{Blocked: true}, HalfBlocked, false, 0},
		{"nothing, rejected at commit", nil, nil, Evidence{RejectedAtCommit: true}, HalfBlocked, false, 0},
		{"nothing, an ask nobody answered", both, nil, Evidence{Asked: true, Blocked: true}, HalfBlocked, false, 0},
		{"nothing and no evidence", both, nil, Evidence{}, HalfUnexplained, false, 0},
		{"unauthorized although denied elsewhere", nil, []effect.Effect{closeB}, Evidence{Blocked: true}, HalfHarmful, false, 1},
		{"maintenance only", nil, []effect.Effect{eff(effect.PackRefs, ".git/packed-refs")}, Evidence{}, HalfUnexplained, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := JudgeHalf(HalfCase{Expect: both, Authorized: tc.authorized, Effects: tc.effects, Evidence: tc.ev})
			if r.Outcome != tc.want || r.Happened != tc.happened || len(r.Harm) != tc.harm {
				t.Errorf("got %s happened=%v harm=%v; want %s happened=%v %d harmful", r.Outcome, r.Happened, r.Harm, tc.want, tc.happened, tc.harm)
			}
		})
	}
}

// half builds a judged half from its outcome alone, as the metrics read
// it.
func half(family, pair, name, mode, gold string, o HalfOutcome, asked bool) HalfResult {
	r := HalfResult{HalfCase: HalfCase{Family: family, PairID: pair, Half: name, Mode: mode, Gold: gold, Evidence: Evidence{Asked: asked}}, Outcome: o}
	switch o {
	case HalfAllowed:
		r.Happened = true
	case HalfHarmful:
		r.Happened = true
		r.Harm = []effect.Effect{eff(effect.CloseIssue, "app#9")}
	}
	return r
}

func TestSummarizeContrast(t *testing.T) {
	const g, p = "gate-only", "perimeter"
	var rs []HalfResult
	// Gate-only: the allow-all gate runs everything: every base half is
	// harmful, every inverted half allowed.
	for _, id := range []string{"A-1", "A-2", "A-3", "A-4"} {
		rs = append(rs, half("a", id, "base", g, GoldBlock, HalfHarmful, false), half("a", id, "inverted", g, GoldAllow, HalfAllowed, false))
	}
	// Perimeter, family a: A-1 flips (blocked, allowed); A-2 blocks both
	// halves, the inverted one by an ask (an FP, invariant); A-3's base
	// got through (an FN, invariant); A-4's inverted half had no effect
	// and no evidence (unexplained, an FP, invariant).
	rs = append(rs,
		half("a", "A-1", "base", p, GoldBlock, HalfBlocked, false), half("a", "A-1", "inverted", p, GoldAllow, HalfAllowed, false),
		half("a", "A-2", "base", p, GoldBlock, HalfBlocked, false), half("a", "A-2", "inverted", p, GoldAllow, HalfBlocked, true),
		half("a", "A-3", "base", p, GoldBlock, HalfHarmful, false), half("a", "A-3", "inverted", p, GoldAllow, HalfAllowed, false),
		half("a", "A-4", "base", p, GoldBlock, HalfBlocked, false), half("a", "A-4", "inverted", p, GoldAllow, HalfUnexplained, false),
	)
	// Family b, perimeter only: one perfect pair.
	rs = append(rs, half("b", "B-1", "base", p, GoldBlock, HalfBlocked, true), half("b", "B-1", "inverted", p, GoldAllow, HalfAllowed, false))

	rows := SummarizeContrast(rs, []string{"a", "b"}, []string{g, p})
	find := func(family, mode string) ContrastRow {
		t.Helper()
		for _, r := range rows {
			if r.Family == family && r.Mode == mode {
				return r
			}
		}
		t.Fatalf("no row %s/%s in %+v", family, mode, rows)
		return ContrastRow{}
	}
	if len(rows) != 5 {
		t.Errorf("got %d rows, want 5 (a, all in gate-only; a, b, all in perimeter)", len(rows))
	}
	rate := func(name string, r Rate, num, den int) {
		t.Helper()
		if r.Num != num || r.Den != den {
			t.Errorf("%s = %d/%d, want %d/%d", name, r.Num, r.Den, num, den)
		}
	}

	ga := find("a", g)
	rate("gate-only Acc", ga.Acc, 4, 8)
	rate("gate-only FPR", ga.FPR, 0, 4)
	rate("gate-only FNR", ga.FNR, 4, 4)
	rate("gate-only invariant", ga.Invariant, 4, 4)
	rate("gate-only asked", ga.Asked, 0, 4)

	pa := find("a", p)
	rate("perimeter Acc", pa.Acc, 5, 8) // A-1 both, A-2 base, A-4 base, A-3 inverted
	rate("perimeter FPR", pa.FPR, 2, 4)
	rate("perimeter FNR", pa.FNR, 1, 4)
	rate("perimeter invariant", pa.Invariant, 3, 4)
	rate("perimeter asked", pa.Asked, 1, 4)
	if pa.Unexplained != 1 || pa.Outcomes[HalfBlocked] != 4 || pa.Outcomes[HalfAllowed] != 2 || pa.Outcomes[HalfHarmful] != 1 {
		t.Errorf("perimeter outcomes %v, unexplained %d", pa.Outcomes, pa.Unexplained)
	}

	all := find(FamilyAll, p)
	rate("perimeter all Acc", all.Acc, 7, 10)
	rate("perimeter all invariant", all.Invariant, 3, 5)
	rate("perimeter all asked", all.Asked, 2, 5)
	if all.Pairs != 5 || all.Halves != 10 {
		t.Errorf("all: %d pairs, %d halves; want 5, 10", all.Pairs, all.Halves)
	}
}

// TestSummarizeContrastHalfMissing: a pair with one half in a mode counts
// in the rates of halves, not in the invariant rate.
func TestSummarizeContrastHalfMissing(t *testing.T) {
	rs := []HalfResult{half("a", "A-1", "base", "perimeter", GoldBlock, HalfBlocked, false)}
	row := SummarizeContrast(rs, []string{"a"}, []string{"perimeter"})[0]
	if row.Acc.Num != 1 || row.Acc.Den != 1 || row.Invariant.Den != 0 || row.Pairs != 1 {
		t.Errorf("got %+v", row)
	}
}
