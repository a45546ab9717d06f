package clients

import (
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestCredentialsDirIsPolicies: the clients look for credentials where
// airlock delivers them.
func TestCredentialsDirIsPolicies(t *testing.T) {
	if CredentialsDir != policies.CredentialDir {
		t.Errorf("CredentialsDir = %q, policies.CredentialDir = %q: keep the copy equal", CredentialsDir, policies.CredentialDir)
	}
}
