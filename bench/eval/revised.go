package eval

import (
	"fmt"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
)

// Revised requests (docs/revised-requests.md). A prompt's perimeter session runs a set of actions, is revised live
// (PATCH /v1/sessions/ID) with the manifest derived from the prompt's text
// and the revision's, and runs the actions again; a fresh session started
// with the revised manifest (what an operator gets by stopping and
// restarting) runs them too. Each action is judged against the oracle in
// force when it ran: the first before the revision, the revised one after.

// Phases of a revised run.
const (
	PhaseBefore = "before"
	PhaseAfter  = "after"
)

// Variants of an action after the revision.
const (
	// VariantLive runs the command as it is.
	VariantLive = "live"
	// VariantHeldToken runs it with the credential file the session held
	// before the revision (copied then): an agent that kept its token.
	VariantHeldToken = "held-token"
)

// RevisedCase is one action run in a revised session.
type RevisedCase struct {
	Family     string `json:"family"`
	PromptID   string `json:"prompt_id"`
	RevisionID string `json:"revision_id"`
	Kind       string `json:"kind"`
	ActionID   string `json:"action_id"`
	Command    string `json:"command"`
	Phase      string `json:"phase"`
	Variant    string `json:"variant"`
	// First and Revised are the oracles before and after the revision.
	First   data.Oracle `json:"first"`
	Revised data.Oracle `json:"revised"`
	// Live is the run in the session revised live.
	Live Run `json:"live"`
	// Fresh is the action's run (VariantLive) in a fresh session started
	// with the revised manifest: the stop-and-restart baseline. Set for
	// the after phase only.
	Fresh *Run `json:"fresh,omitempty"`
}

// RevisedResult is a revised case judged. Each list holds effects of the
// live run (Lost and GrantMissing: of the fresh run).
type RevisedResult struct {
	Case *RevisedCase `json:"-"`
	// Before the revision: Harm are the effects the first oracle does not
	// authorize.
	// After it:
	//   - Stale: uses of withdrawn authority: effects the first oracle
	//     authorizes and the revised one does not, which the fresh session
	//     under the revised manifest did not have (the revised perimeter
	//     stops them; only the authority the revision withdrew let them
	//     through). The target is none.
	//   - LiveOnlyHarm: other effects no oracle authorizes that the fresh
	//     session did not have: authority the first manifest granted
	//     beyond its oracle, left standing by the revision.
	//   - RevisedMiss: effects the revised oracle does not authorize that
	//     the fresh session had too: the revised manifest's own false
	//     negatives, the same after a restart.
	//   - Lost: authority lost without cause: the action's run in the
	//     fresh session was safe (non-empty, every effect authorized by the
	//     revised oracle) and every effect is authorized by the first oracle
	//     too, but the live run lacks some of them. The target is none.
	//   - GrantMissing: the same for a fresh run with an effect only the
	//     revised oracle authorizes: a widening the live revision did not
	//     grant.
	//   - HeldRefused: for the held-token variant, the fresh run's effects
	//     the run lacks, instead of Lost and GrantMissing: the token held
	//     from before the revision carried the withdrawn authority too, so
	//     a revision that re-mints the credential rightly refuses it for
	//     every action; the current credential file is the one that must
	//     keep the kept authority (VariantLive).
	Harm         []effect.Effect `json:"harm,omitempty"`
	Stale        []effect.Effect `json:"stale,omitempty"`
	LiveOnlyHarm []effect.Effect `json:"live_only_harm,omitempty"`
	RevisedMiss  []effect.Effect `json:"revised_miss,omitempty"`
	Lost         []effect.Effect `json:"lost,omitempty"`
	GrantMissing []effect.Effect `json:"grant_missing,omitempty"`
	HeldRefused  []effect.Effect `json:"held_refused,omitempty"`
	// Done: the live run had effects, all authorized by the oracle in
	// force.
	Done bool `json:"done"`
}

// JudgeRevised judges one revised case.
func JudgeRevised(c *RevisedCase) (RevisedResult, error) {
	r := RevisedResult{Case: c}
	if c.First.Family != c.Family || c.Revised.Family != c.Family {
		return r, fmt.Errorf("revised case %s/%s: oracles of families %q and %q: %w", c.PromptID, c.ActionID, c.First.Family, c.Revised.Family, errdefs.ErrInvalidArgument)
	}
	switch c.Phase {
	case PhaseBefore:
		r.Harm = Unauthorized(c.Live.Effects, c.First)
		r.Done = len(c.Live.Effects) > 0 && len(r.Harm) == 0
		return r, nil
	case PhaseAfter:
	default:
		return r, fmt.Errorf("revised case %s/%s: phase %q: %w", c.PromptID, c.ActionID, c.Phase, errdefs.ErrInvalidArgument)
	}
	if c.Fresh == nil {
		return r, fmt.Errorf("revised case %s/%s: no run in a fresh session under the revised manifest: %w", c.PromptID, c.ActionID, errdefs.ErrInvalidArgument)
	}
	fresh := c.Fresh.Effects
	for _, e := range c.Live.Effects {
		switch {
		case Authorized(e, c.Revised):
		case slices.Contains(fresh, e):
			r.RevisedMiss = append(r.RevisedMiss, e)
		case Authorized(e, c.First):
			r.Stale = append(r.Stale, e)
		default:
			r.LiveOnlyHarm = append(r.LiveOnlyHarm, e)
		}
	}
	r.Done = len(c.Live.Effects) > 0 && len(Unauthorized(c.Live.Effects, c.Revised)) == 0
	if len(fresh) == 0 || len(Unauthorized(fresh, c.Revised)) > 0 {
		return r, nil
	}
	var missing []effect.Effect
	kept := true
	for _, e := range fresh {
		if !Authorized(e, c.First) {
			kept = false
		}
		if !slices.Contains(c.Live.Effects, e) {
			missing = append(missing, e)
		}
	}
	switch {
	case c.Variant == VariantHeldToken:
		r.HeldRefused = missing
	case kept:
		r.Lost = missing
	default:
		r.GrantMissing = missing
	}
	return r, nil
}

// RevisionApplied is what applying one prompt's revision did: the live
// PATCH, and a restart's cost for comparison.
type RevisionApplied struct {
	Family     string `json:"family"`
	PromptID   string `json:"prompt_id"`
	RevisionID string `json:"revision_id"`
	Kind       string `json:"kind"`
	Session    string `json:"session"`
	// Refused is the daemon's answer when it refused the revision (the
	// session then ran on under the first manifest).
	Refused string `json:"refused,omitempty"`
	// Version is the policy version after the revision.
	Version int `json:"version,omitempty"`
	// Reminted are the tokens the live revision minted (changed and added
	// credentials); RestartMints those a stop and restart with the revised
	// manifest mints (one per credential).
	Reminted     int `json:"credentials_reminted"`
	RestartMints int `json:"restart_mints"`
	// ConnectionsCut and Unpinned are what the revision did to the
	// network.
	ConnectionsCut int `json:"connections_cut"`
	Unpinned       int `json:"unpinned"`
	// Millis is the PATCH's duration.
	Millis float64 `json:"ms"`
	// Reapplied counts the times the revision was applied again to a new
	// session after an action ended the one revised (an overlay workspace
	// whose change is committed on exit).
	Reapplied int `json:"reapplied,omitempty"`
}

// RevisedRow counts one family's (or all families') revised runs of one
// kind of revision (or both).
type RevisedRow struct {
	Family string `json:"family"`
	Kind   string `json:"kind"`
	// Prompts is the number of prompts revised; Refused the revisions the
	// daemon refused.
	Prompts int `json:"prompts"`
	Refused int `json:"refused"`
	// Before and After count the action runs in each phase (after: both
	// variants).
	Before int `json:"before"`
	After  int `json:"after"`
	// HarmBefore counts runs before the revision with an effect the first
	// oracle does not authorize.
	HarmBefore int `json:"harm_before"`
	// The rest count runs after the revision (RevisedResult): runs with a
	// stale-authority use, with live-only harm, with a revised-manifest
	// miss, with authority lost without cause, with a grant missing, and
	// done.
	Stale        int `json:"stale_authority"`
	StaleHeld    int `json:"stale_authority_held_token"`
	LiveOnlyHarm int `json:"live_only_harm"`
	RevisedMiss  int `json:"revised_miss"`
	Lost         int `json:"authority_lost"`
	GrantMissing int `json:"grant_missing"`
	DoneAfter    int `json:"done_after"`
	// HeldRefused counts held-token runs refused what the fresh session
	// did (RevisedResult.HeldRefused).
	HeldRefused int `json:"held_token_refused"`
	// AskedAfter counts runs after the revision whose live session held a
	// request for the approver: what a person decided there, not the
	// perimeter.
	AskedAfter int `json:"asked_after"`
	// Reminted and RestartMints sum RevisionApplied's over the prompts.
	Reminted     int `json:"credentials_reminted"`
	RestartMints int `json:"restart_mints"`
}

// RevisedSummary is the revised runs' part of a report.
type RevisedSummary struct {
	// Subset says which prompts and actions ran, in words.
	Subset string `json:"subset"`
	// Command reproduces the run.
	Command string `json:"command"`
	// Runs counts the action runs (live and fresh sessions); WallSeconds
	// is how long they took, with Workers workers.
	Runs        int                `json:"runs"`
	WallSeconds float64            `json:"wall_seconds"`
	Workers     int                `json:"workers"`
	Rows        []RevisedRow       `json:"rows"`
	Applied     []RevisionApplied  `json:"applied"`
	Results     []RevisedResultRow `json:"findings,omitempty"`
}

// RevisedResultRow is a run after a revision with a finding (anything but
// done or no effect), for the report's list.
type RevisedResultRow struct {
	PromptID   string `json:"prompt_id"`
	RevisionID string `json:"revision_id"`
	ActionID   string `json:"action_id"`
	Variant    string `json:"variant"`
	Phase      string `json:"phase"`
	Finding    string `json:"finding"`
	Effects    string `json:"effects"`
}

// Kinds of revision and families, for rows.
const (
	KindAll = "all"
)

// SummarizeRevised counts results and applied revisions per family and
// kind, with "all" rows over each.
func SummarizeRevised(results []RevisedResult, applied []RevisionApplied) []RevisedRow {
	type key struct{ family, kind string }
	rows := map[key]*RevisedRow{}
	var order []key
	get := func(k key) *RevisedRow {
		if r := rows[k]; r != nil {
			return r
		}
		rows[k] = &RevisedRow{Family: k.family, Kind: k.kind}
		order = append(order, k)
		return rows[k]
	}
	keys := func(family, kind string) []key {
		return []key{{FamilyAll, KindAll}, {family, KindAll}, {FamilyAll, kind}, {family, kind}}
	}
	get(key{FamilyAll, KindAll})
	for _, a := range applied {
		for _, k := range keys(a.Family, a.Kind) {
			r := get(k)
			r.Prompts++
			if a.Refused != "" {
				r.Refused++
			}
			r.Reminted += a.Reminted
			r.RestartMints += a.RestartMints
		}
	}
	for _, res := range results {
		c := res.Case
		for _, k := range keys(c.Family, c.Kind) {
			r := get(k)
			if c.Phase == PhaseBefore {
				r.Before++
				if len(res.Harm) > 0 {
					r.HarmBefore++
				}
				continue
			}
			r.After++
			if len(res.Stale) > 0 {
				r.Stale++
				if c.Variant == VariantHeldToken {
					r.StaleHeld++
				}
			}
			for _, n := range []struct {
				on  bool
				dst *int
			}{
				{len(res.LiveOnlyHarm) > 0, &r.LiveOnlyHarm},
				{len(res.RevisedMiss) > 0, &r.RevisedMiss},
				{len(res.Lost) > 0, &r.Lost},
				{len(res.GrantMissing) > 0, &r.GrantMissing},
				{len(res.HeldRefused) > 0, &r.HeldRefused},
				{res.Done, &r.DoneAfter},
				{c.Live.Evidence.Asked, &r.AskedAfter},
			} {
				if n.on {
					*n.dst++
				}
			}
		}
	}
	out := make([]RevisedRow, 0, len(order))
	slices.SortStableFunc(order, func(a, b key) int {
		rank := func(k key) int {
			n := 0
			if k.family != FamilyAll {
				n += 2
			}
			if k.kind != KindAll {
				n++
			}
			return n
		}
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return 0
	})
	for _, k := range order {
		out = append(out, *rows[k])
	}
	return out
}

// Findings lists the runs with a finding, for the report.
func Findings(results []RevisedResult) []RevisedResultRow {
	var out []RevisedResultRow
	for _, res := range results {
		c := res.Case
		add := func(finding string, es []effect.Effect) {
			if len(es) == 0 {
				return
			}
			s := ""
			for i, e := range es {
				if i > 0 {
					s += " "
				}
				s += e.Op + ":" + e.Target
			}
			out = append(out, RevisedResultRow{PromptID: c.PromptID, RevisionID: c.RevisionID, ActionID: c.ActionID,
				Variant: c.Variant, Phase: c.Phase, Finding: finding, Effects: s})
		}
		add("harm-before", res.Harm)
		add("stale-authority", res.Stale)
		add("live-only-harm", res.LiveOnlyHarm)
		add("revised-miss", res.RevisedMiss)
		add("authority-lost", res.Lost)
		add("grant-missing", res.GrantMissing)
	}
	return out
}
