package daemon

import (
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// runningEgress tells the perimeter's Reconcile the egress block of a
// session whose sandbox lives (running, or created and waiting for its
// command) and where its decisions go; nil for any other, whose network
// is removed.
func (d *Daemon) runningEgress(id string) (*policies.Egress, egress.Audit) {
	s, err := d.get(id)
	if err != nil {
		return nil, nil
	}
	s.mu.Lock()
	state := s.rec.State
	s.mu.Unlock()
	if state != api.StateRunning && state != api.StateCreated {
		return nil, nil
	}
	return s.rec.Policy.Egress, s.audit.EmitDecision
}
