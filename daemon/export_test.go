package daemon

import (
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/secrets"
)

// SwapAdmission replaces the daemon's admission policy and returns the
// previous one, for tests that need a policy of their own on the shared
// daemon.
func (d *Daemon) SwapAdmission(a *policies.Admission) *policies.Admission {
	return d.admission.swap(a)
}

// L7Trust returns session id's CA and secrets as the daemon holds them
// for the L7 gateway.
func (d *Daemon) L7Trust(id string) (*egress.SessionCA, *secrets.Set, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ca, s.secrets, nil
}
