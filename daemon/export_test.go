package daemon

import "github.com/airlock-sandbox/airlock/policies"

// SetAfterBind sets the hook Listen calls right after it binds a socket.
func SetAfterBind(f func(path string)) { afterBind = f }

// SwapAdmission replaces the daemon's admission policy and returns the
// previous one, for tests that need a policy of their own on the shared
// daemon.
func (d *Daemon) SwapAdmission(a *policies.Admission) *policies.Admission {
	return d.admission.swap(a)
}
