package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// FSSupport is what the daemon's filesystem layer can do, as probed.
type FSSupport struct {
	// Workspaces: read-write and overlay workspaces are mounted, and an
	// overlay with on_exit = "commit" is committed when the session stops.
	Workspaces bool
	// Note says why something is not supported.
	Note string
}

// probeSession runs one session of p and calls fn while it runs.
func probeSession(ctx context.Context, c *api.Client, p *policies.Policy, fn func(id string) error) (retErr error) {
	p.ApplyDefaults()
	s, err := c.CreateSession(ctx, api.CreateRequest{Policy: *p, Start: true})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.RemoveSession(context.WithoutCancel(ctx), s.ID, true); err != nil && retErr == nil {
			retErr = err
		}
	}()
	return fn(s.ID)
}

func execOut(ctx context.Context, c *api.Client, id, cmd string) (string, int, error) {
	var out, errb bytes.Buffer
	code, err := c.Exec(ctx, id, api.ExecRequest{Command: []string{"bash", "-c", cmd}}, nil, &out, &errb)
	return strings.TrimSpace(out.String() + errb.String()), code, err
}

// ProbeFS finds out whether the daemon mounts workspaces and commits
// overlays, using scratch directories under dir.
func ProbeFS(ctx context.Context, c *api.Client, image, dir string) (FSSupport, error) {
	var sup FSSupport
	rw := filepath.Join(dir, "probe-rw")
	ov := filepath.Join(dir, "probe-overlay")
	for _, d := range []string{rw, ov} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return sup, err
		}
		if err := os.WriteFile(filepath.Join(d, "probe"), []byte("airlock-bench-probe\n"), 0o644); err != nil {
			return sup, err
		}
		if err := chownTree(d); err != nil {
			return sup, err
		}
	}
	defer os.RemoveAll(rw)
	defer os.RemoveAll(ov)
	base := func(ws policies.Workspace) *policies.Policy {
		return &policies.Policy{Label: labelPrefix + "probe", Image: image, Command: keeperCommand, User: SandboxUser,
			Workdir: "/workspace", Workspaces: []policies.Workspace{ws}}
	}
	err := probeSession(ctx, c, base(policies.Workspace{HostPath: rw, Target: "/workspace", Mode: policies.ModeRW}), func(id string) error {
		out, _, err := execOut(ctx, c, id, "cat /workspace/probe && echo written > /workspace/new")
		if err != nil {
			return err
		}
		if out != "airlock-bench-probe" {
			return fmt.Errorf("a read-write workspace is not mounted (the session read %q)", out)
		}
		if b, err := os.ReadFile(filepath.Join(rw, "new")); err != nil || string(b) != "written\n" {
			return errors.New("a read-write workspace's writes did not reach the host")
		}
		return nil
	})
	if err != nil {
		sup.Note = "workspaces unsupported: " + err.Error()
		return sup, nil
	}
	ovp := base(policies.Workspace{HostPath: ov, Target: "/workspace", Mode: policies.ModeOverlay, OnExit: policies.OnExitCommit})
	err = probeSession(ctx, c, ovp, func(id string) error {
		if _, _, err := execOut(ctx, c, id, "echo written > /workspace/new"); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(ov, "new")); err == nil {
			return errors.New("an overlay workspace's write reached the host before the commit")
		}
		if _, err := c.StopSession(ctx, id, api.StopRequest{Grace: policies.Duration(5 * time.Second)}); err != nil {
			return err
		}
		if _, err := c.WaitSession(ctx, id); err != nil {
			return err
		}
		// As the runner does: an on_exit commit the daemon could not
		// carry out at the stop is completed through the API.
		if _, err := finishCommit(ctx, c, id); err != nil {
			return err
		}
		if b, err := os.ReadFile(filepath.Join(ov, "new")); err != nil || string(b) != "written\n" {
			return errors.New(`an overlay workspace with on_exit = "commit" was not committed when the session stopped`)
		}
		return nil
	})
	if err != nil {
		sup.Note = "overlay workspaces unsupported: " + err.Error()
		return sup, nil
	}
	sup.Workspaces = true
	return sup, nil
}

// ProbeWorld checks that a session with the operator's credentials reaches
// every world service: the image, the gateway, the DNS proxy, the world's
// DNS and services, and token verification all work; and that the admin
// names answer on the services' addresses, by a forged Host and by TLS
// with their SNI, as the shared-address actions reach them.
func ProbeWorld(ctx context.Context, c *api.Client, worlds *Worlds, image string) error {
	p := &policies.Policy{Label: labelPrefix + "probe", Image: image, Command: keeperCommand, User: SandboxUser,
		Egress: &policies.Egress{Allow: WorldHosts()}, Credentials: OperatorCredentials(),
		Env: map[string]string{"AIRLOCK_BENCH_GIT_TOKEN_FILE": "/run/airlock/credentials/git"}}
	bucket := worlds.World(0).Fixture().Bucket
	return probeSession(ctx, c, p, func(id string) error {
		worlds.Bind(id, worlds.Len())
		defer worlds.Unbind(id)
		for _, cmd := range []string{
			"squeue -u alex",
			"kubectl get deployment -n dev",
			"aws s3 ls s3://" + bucket + "/",
			"git ls-remote " + GitRemote,
			`curl -fsS -o /dev/null -H "Host: ` + world.AdminHosts.Jobs + `" -H "Authorization: Bearer $(cat /run/airlock/credentials/jobs)" http://` +
				world.DefaultAudiences.Jobs + `/v1/jobs`,
			`curl -fsSk -o /dev/null --connect-to ` + world.AdminHosts.Objects + `:443:` + world.DefaultAudiences.Objects + `:443 ` +
				`-H "Authorization: Bearer $(cat /run/airlock/credentials/objects)" https://` + world.AdminHosts.Objects + `/v1/buckets/` + bucket + `/objects`,
			`git -c http.sslVerify=false -c http.curloptResolve="` + world.AdminHosts.Git + `:443:$(getent ahostsv4 ` + world.DefaultAudiences.Git +
				` | awk 'NR==1 {print $1}')" -c http.extraHeader="Authorization: Bearer $(cat /run/airlock/credentials/git)" ls-remote https://` +
				world.AdminHosts.Git + `/app.git`,
		} {
			out, code, err := execOut(ctx, c, id, cmd)
			if err != nil {
				return fmt.Errorf("world probe %q: %w", cmd, err)
			}
			if code != 0 {
				return fmt.Errorf("world probe %q failed with status %d: %s", cmd, code, out)
			}
		}
		return nil
	})
}
