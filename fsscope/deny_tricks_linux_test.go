package fsscope

import (
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestDenyReadSandboxTricks tries, as the sandbox user, to reach a masked
// file's data through a hard link, a rename, a copy-up (chmod), a masked
// directory's children, and the case variant of a name.
func TestDenyReadSandboxTricks(t *testing.T) {
	for _, mode := range []string{policies.ModeOverlay, policies.ModeRO, policies.ModeRW} {
		t.Run(mode, func(t *testing.T) {
			host := hostTree(t, hostOwner, map[string]string{
				".env": "T_ENV", ".aws/credentials": "T_AWS", "sub/.ENV": "T_CASE", "README.md": "readme",
			})
			ws := overlayWS(host)
			ws.Mode = mode
			if mode != policies.ModeOverlay {
				ws.OnExit = ""
			}
			s := setup(t, policyWith(ws), sandboxer)
			res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
				probeAction{Op: "link", Path: "/workspace/l1", Arg: "/workspace/.env"},
				probeAction{Op: "read", Path: "/workspace/l1"},
				probeAction{Op: "rename", Path: "/workspace/.env", Arg: "/workspace/r1"},
				probeAction{Op: "read", Path: "/workspace/r1"},
				probeAction{Op: "rename", Path: "/workspace/.aws", Arg: "/workspace/r2"},
				probeAction{Op: "read", Path: "/workspace/r2/credentials"},
				probeAction{Op: "chmod", Path: "/workspace/.env", Arg: "644"},
				probeAction{Op: "read", Path: "/workspace/.env"},
				probeAction{Op: "read", Path: "/workspace/.aws/credentials"},
				probeAction{Op: "read", Path: "/workspace/sub/.ENV"},
				probeAction{Op: "read", Path: "/workspace/sub/.env"},
				probeAction{Op: "link", Path: "/workspace/l2", Arg: "/workspace/sub/.ENV"},
				probeAction{Op: "read", Path: "/workspace/l2"},
				probeAction{Op: "rename", Path: "/workspace/sub", Arg: "/workspace/sub2"},
				probeAction{Op: "read", Path: "/workspace/sub2/.ENV"},
			)
			noSecret(t, res, "T_ENV", "T_AWS", "T_CASE")
		})
	}
}
