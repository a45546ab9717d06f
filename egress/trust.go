package egress

import (
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/airlock-sandbox/airlock/egress/sessionca"
)

// SessionCA is the CA whose certificates the L7 gateway shows a session
// on the TLS it terminates (SessionConfig.CA). Its key stays in the
// daemon's memory and the session's state directory, never in the sandbox.
type SessionCA = sessionca.CA

// NewSessionCA makes the CA of session id and saves it in the session's
// state directory dir (key 0600), for LoadSessionCA after a restart.
func NewSessionCA(dir, id string) (*SessionCA, error) {
	ca, err := sessionca.New(id)
	if err != nil {
		return nil, err
	}
	if err := ca.Save(dir); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadSessionCA reads back the CA NewSessionCA saved in dir.
func LoadSessionCA(dir string) (*SessionCA, error) { return sessionca.Load(dir) }

// TrustSpecOpts make the sandbox trust the session CA saved in dir: the
// image's own system bundle with the CA added, bound read-only over it,
// and the variables runtimes read a bundle from (SSL_CERT_FILE,
// NODE_EXTRA_CA_CERTS, ...).
func TrustSpecOpts(dir string) []oci.SpecOpts { return sessionca.TrustOpts(dir) }
