package daemon

import "github.com/airlock-sandbox/airlock/policies"

// SwapAdmission replaces the daemon's admission policy and returns the
// previous one, for tests that need a policy of their own on the shared
// daemon.
func (d *Daemon) SwapAdmission(a *policies.Admission) *policies.Admission {
	return d.admission.swap(a)
}
