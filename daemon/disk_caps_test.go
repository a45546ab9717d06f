package daemon_test

import "github.com/airlock-sandbox/airlock/policies"

func setCaps(p *policies.Policy, logSize, auditSize int64) {
	p.Resources.LogSize, p.Resources.AuditSize = logSize, auditSize
}
