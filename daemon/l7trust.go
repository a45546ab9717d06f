package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/secrets"
)

// prepareL7 makes what the L7 gateway needs of a new session in its
// state directory dir: the session's CA (egress.NewSessionCA) when its egress
// block has l7 = "check", and its secrets: values read, placeholders made
// and kept. A manifest with secrets but no L7 gateway is refused: nothing
// else could put their values in requests.
func prepareL7(dir, id string, p *policies.Policy) (*egress.SessionCA, *secrets.Set, error) {
	if len(p.Secrets) > 0 && !p.Egress.L7Enabled() {
		return nil, nil, fmt.Errorf("the manifest declares secrets, which only the L7 gateway injects, but its egress block does not set l7 = %q: %w", policies.L7Check, errdefs.ErrInvalidArgument)
	}
	var ca *egress.SessionCA
	if p.Egress.L7Enabled() {
		var err error
		if ca, err = egress.NewSessionCA(dir, id); err != nil {
			return nil, nil, err
		}
	}
	set, err := secrets.Prepare(dir, p.Secrets)
	if err != nil {
		return nil, nil, err
	}
	return ca, set, nil
}

// l7SpecOpts deliver the session's trust in its CA and its secrets'
// placeholders; they come after the manifest's environment, whose
// variables of the same names they replace.
func l7SpecOpts(dir string, ca *egress.SessionCA, set *secrets.Set) []oci.SpecOpts {
	var opts []oci.SpecOpts
	if ca != nil {
		opts = append(opts, egress.TrustSpecOpts(dir)...)
	}
	return append(opts, set.SpecOpts()...)
}

// reopenL7 is prepareL7 for a session an earlier daemon process made:
// the CA and the placeholders are read back from dir, the secrets' values
// read again from their sources. What cannot be read is logged: the
// gateway then has no CA for the session (it cannot terminate its TLS),
// or a secret stays unavailable (requests that need it are refused).
func reopenL7(ctx context.Context, dir string, p *policies.Policy) (*egress.SessionCA, *secrets.Set) {
	var ca *egress.SessionCA
	if p.Egress.L7Enabled() {
		var err error
		if ca, err = egress.LoadSessionCA(dir); err != nil {
			log.G(ctx).Error("session CA", "error", err)
		}
	}
	set, err := secrets.Open(dir, p.Secrets)
	if err != nil {
		log.G(ctx).Error("secrets", "error", err)
	}
	return ca, set
}

// gatewaySecrets are the session's secrets as the L7 gateway takes them:
// each value as the Set holds it now (nil while unavailable).
func gatewaySecrets(set *secrets.Set) []egress.Secret {
	var out []egress.Secret
	for _, b := range set.Bound() {
		sec := egress.Secret{Name: b.Name, Placeholder: b.Placeholder, Value: b.Value}
		for _, in := range b.Inject {
			sec.Inject = append(sec.Inject, egress.Inject{
				Host: strings.ToLower(strings.TrimSuffix(in.Host, ".")), Header: in.Header, Bearer: in.Bearer,
			})
		}
		out = append(out, sec)
	}
	return out
}
