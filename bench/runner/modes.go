package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/report"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// Modes. Every mode runs the action in an airlock sandbox of the same
// image, user, environment and working directory; only the layers differ.
const (
	// ModeGateOnly: no perimeter layer. The session holds the operator's
	// full credential for every world service, reaches every world host,
	// and has the workspace mounted read-write.
	ModeGateOnly = eval.ModeGateOnly
	// ModeFSOnly: the manifest's workspace (an overlay committed on exit
	// through its protect rules); otherwise as gate-only.
	ModeFSOnly = "fs-only"
	// ModeEgressOnly: the manifest's egress allowlist, at layers 3-4 (no
	// L7 gateway); otherwise as gate-only.
	ModeEgressOnly = "egress-only"
	// ModeL7Only: the L7 gateway's checks alone: gate-only's open egress
	// with l7 = "check" (a connection's Host or SNI must be a world host
	// the session resolved to the address it dials) and the manifest's
	// HTTP rules; otherwise as gate-only.
	ModeL7Only = "l7-only"
	// ModeCredentialsOnly: the manifest's credential; otherwise as
	// gate-only.
	ModeCredentialsOnly = "credentials-only"
	// ModePerimeter: the manifest as generated, every layer on.
	ModePerimeter = report.PerimeterMode
)

// Modes lists the modes in report order.
var Modes = []string{ModeGateOnly, ModeFSOnly, ModeEgressOnly, ModeL7Only, ModeCredentialsOnly, ModePerimeter}

// layers says which of the manifest's layers a mode applies: egress is
// the allowlist, l7 the gateway's checks and HTTP rules (both from the
// manifest's egress block).
type layers struct{ fs, egress, l7, credentials bool }

func modeLayers(mode string) (layers, error) {
	switch mode {
	case ModeGateOnly:
		return layers{}, nil
	case ModeFSOnly:
		return layers{fs: true}, nil
	case ModeEgressOnly:
		return layers{egress: true}, nil
	case ModeL7Only:
		return layers{l7: true}, nil
	case ModeCredentialsOnly:
		return layers{credentials: true}, nil
	case ModePerimeter:
		return layers{fs: true, egress: true, l7: true, credentials: true}, nil
	}
	return layers{}, fmt.Errorf("unknown mode %q (modes: %v): %w", mode, Modes, errdefs.ErrInvalidArgument)
}

// WorldHosts are the world's host names: "open egress" reaches all of them.
func WorldHosts() []string {
	a := world.DefaultAudiences
	return []string{a.Git, a.Jobs, a.Services, a.Objects}
}

// OperatorCredentials are the gate-only credentials: for every world
// service, a token with every action of the service and no selector, as an
// operator holds. Names match where the bench clients look for a service's
// token (/run/airlock/credentials/<service>).
func OperatorCredentials() []policies.Credential {
	a := world.DefaultAudiences
	return []policies.Credential{
		{Name: world.ServiceGit, Audience: a.Git, Scopes: []string{"git.*"}},
		{Name: world.ServiceJobs, Audience: a.Jobs, Scopes: []string{"jobs.*"}},
		{Name: world.ServiceServices, Audience: a.Services, Scopes: []string{"services.*"}},
		{Name: world.ServiceObjects, Audience: a.Objects, Scopes: []string{"objects.*"}},
	}
}

// ContrastWorldHosts are the hosts gate-only's open egress reaches in the
// contrast-pair families (bench/authgate): the world's hosts, and the
// issue tracker, the model registry, the package registry and the paste
// site, which those families use.
func ContrastWorldHosts() []string {
	a := world.DefaultAudiences
	return append(WorldHosts(), a.Tracker, a.Models, a.Packages, a.Paste)
}

// ContrastOperatorCredentials are gate-only's credentials in the
// contrast-pair families: the operator's, and a token with every action
// for the issue tracker, the model registry and the package registry (the
// paste site takes none). A static registry token the action finds in the
// workspace is sent as is, in every mode.
func ContrastOperatorCredentials() []policies.Credential {
	a := world.DefaultAudiences
	return append(OperatorCredentials(),
		policies.Credential{Name: world.ServiceTracker, Audience: a.Tracker, Scopes: []string{"tracker.*"}},
		policies.Credential{Name: world.ServiceModels, Audience: a.Models, Scopes: []string{"models.*"}},
		policies.Credential{Name: world.ServicePackages, Audience: a.Packages, Scopes: []string{"packages.*"}},
	)
}

// modePolicy returns the session policy of mode, made from the perimeter
// manifest mp: the layers the mode does not take from the manifest are
// replaced by their gate-only form. wsDir is the workspace's host
// directory; empty means sessions get no workspace (the daemon has no
// filesystem layer).
func modePolicy(mode string, mp *policies.Policy, wsDir string) (*policies.Policy, error) {
	return modePolicyWith(mode, mp, wsDir, WorldHosts(), OperatorCredentials())
}

// modePolicyWith is modePolicy with gate-only's open egress reaching hosts
// and its credentials creds.
func modePolicyWith(mode string, mp *policies.Policy, wsDir string, hosts []string, creds []policies.Credential) (*policies.Policy, error) {
	l, err := modeLayers(mode)
	if err != nil {
		return nil, err
	}
	p := mp.Clone()
	switch {
	case wsDir == "":
		p.Workspaces = nil
	case l.fs:
		if len(p.Workspaces) != 1 {
			return nil, fmt.Errorf("manifest %q has %d workspaces, want 1", mp.Label, len(p.Workspaces))
		}
		p.Workspaces[0].HostPath = wsDir
	default:
		target := "/workspace"
		if len(p.Workspaces) == 1 {
			target = p.Workspaces[0].Target
		}
		p.Workspaces = []policies.Workspace{{HostPath: wsDir, Target: target, Mode: policies.ModeRW}}
	}
	manifest := p.Egress
	if !l.egress {
		p.Egress = &policies.Egress{Allow: slices.Clone(hosts)}
	}
	if l.l7 {
		p.Egress.L7 = policies.L7Check
		if manifest != nil {
			p.Egress.Inspect, p.Egress.HTTP = manifest.Inspect, manifest.HTTP
		}
		if !l.egress {
			p.Egress.Allow = ruledOnGatewayPorts(p.Egress.Allow, p.Egress.HTTP)
		}
	} else {
		p.Egress.L7, p.Egress.Inspect, p.Egress.HTTP = "", "", nil
	}
	if !l.credentials {
		p.Credentials = slices.Clone(creds)
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s policy of %q: %w", mode, mp.Label, err)
	}
	return p, nil
}

// ruledOnGatewayPorts narrows open egress for the hosts with HTTP rules to
// the ports the gateway checks (the world serves HTTP and HTTPS on 80 and
// 443 only), as validation asks: on any other port a request would pass
// by the rules.
func ruledOnGatewayPorts(allow []string, http []policies.HTTPHost) []string {
	var out []string
	for _, a := range allow {
		if !slices.ContainsFunc(http, func(h policies.HTTPHost) bool { return h.Host == a }) {
			out = append(out, a)
			continue
		}
		for _, port := range policies.DefaultL7Ports {
			out = append(out, a+":"+strconv.Itoa(int(port)))
		}
	}
	return out
}

// overlay reports whether p's workspace is an overlay (its changes reach
// the host only through a commit when the session ends).
func overlay(p *policies.Policy) bool {
	return slices.ContainsFunc(p.Workspaces, func(w policies.Workspace) bool { return w.Mode == policies.ModeOverlay })
}

// configKey identifies what a session of p enforces: p without its label
// and its workspace's host path, which differ between equal sessions.
func configKey(p *policies.Policy) string {
	c := p.Clone()
	c.Label = ""
	for i := range c.Workspaces {
		c.Workspaces[i].HostPath = ""
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a Policy always encodes
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// labelPrefix starts the label of every session the runner creates.
const labelPrefix = "bench-"
