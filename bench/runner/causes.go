package runner

import (
	"slices"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world"
)

// Cause ties one effect of a run to what made it. A world effect's cause
// is the last request of the run's session that the world allowed and that
// named the effect's target (world.Event.Targets use the oracles' names,
// as effects do); a workspace effect's is the run's command itself, which
// wrote the files or moved the checkout's refs.
type Cause struct {
	Effect effect.Effect `json:"effect"`
	// Seq, Method and Path are the world's record of the request (Seq 0:
	// none).
	Seq    uint64 `json:"seq,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Note says what stands for the request where there is none.
	Note string `json:"note,omitempty"`
}

// Notes of a cause without a request.
const (
	CauseCommand   = "the run's command, in the workspace"
	CauseUnclaimed = "no allowed request of the session named it"
)

// attribute gives each effect its cause among events, the requests the
// world saw from the run's session in order.
func attribute(effects []effect.Effect, events []world.Event) []Cause {
	out := make([]Cause, 0, len(effects))
	for _, e := range effects {
		c := Cause{Effect: e}
		switch {
		case e.Where != effect.World:
			c.Note = CauseCommand
		default:
			c.Note = CauseUnclaimed
			for i := len(events) - 1; i >= 0; i-- {
				ev := events[i]
				if ev.Decision == world.DecisionAllow && slices.Contains(ev.Targets, e.Target) {
					c.Seq, c.Method, c.Path, c.Note = ev.Seq, ev.Method, ev.Path, ""
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}
