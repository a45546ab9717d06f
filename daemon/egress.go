package daemon

import (
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// runningEgress tells the perimeter's Reconcile the egress block of a
// running session and where its decisions go; nil for any other.
func (d *Daemon) runningEgress(id string) (*policies.Egress, egress.Audit) {
	s, err := d.get(id)
	if err != nil || !s.running() {
		return nil, nil
	}
	return s.rec.Policy.Egress, s.audit.EmitDecision
}
