package daemon

import (
	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// runningEgress tells the perimeter's Reconcile the network configuration
// of a session whose sandbox lives (running, or created and waiting for
// its command); nil for any other, whose network is removed.
func (d *Daemon) runningEgress(id string) *egress.SessionConfig {
	s, err := d.get(id)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	state := s.rec.State
	p := s.rec.Policy
	s.mu.Unlock()
	if state != api.StateRunning && state != api.StateCreated {
		return nil
	}
	sc := d.egressConfig(s, p, "")
	return &sc
}

// egressConfig is session s's configuration for the perimeter, its
// resolv.conf in dir.
func (d *Daemon) egressConfig(s *session, p policies.Policy, dir string) egress.SessionConfig {
	return egress.SessionConfig{Egress: p.Egress, Dir: dir, Audit: s.audit.EmitDecision}
}
