package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"
)

// ShimState asks a session's shim directly, without containerd, for its
// main process's state. A shim outlives containerd, so while containerd is
// down (killed, and being restarted) this is the only place the exit of a
// sandbox that ended meanwhile is known: a restarted containerd cleans up
// such a task without reporting its exit. It needs Config.ShimStateDir.
func (r *Runtime) ShimState(ctx context.Context, id string) (TaskState, error) {
	if r.cfg.ShimStateDir == "" {
		return TaskState{}, fmt.Errorf("containerd's state directory is unknown: %w", errdefs.ErrNotImplemented)
	}
	bundle := filepath.Join(r.cfg.ShimStateDir, "io.containerd.runtime.v2.task", r.cfg.Namespace, id)
	b, err := os.ReadFile(filepath.Join(bundle, "bootstrap.json"))
	if err != nil {
		if os.IsNotExist(err) {
			return TaskState{}, nil
		}
		return TaskState{}, err
	}
	var params struct {
		Address  string `json:"address"`
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(b, &params); err != nil {
		return TaskState{}, fmt.Errorf("shim bootstrap of %s: %w", id, err)
	}
	sock, ok := strings.CutPrefix(params.Address, "unix://")
	if !ok || params.Protocol != "ttrpc" {
		return TaskState{}, fmt.Errorf("shim of %s at %q (%s): not a ttrpc unix socket: %w", id, params.Address, params.Protocol, errdefs.ErrNotImplemented)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return TaskState{}, fmt.Errorf("shim of %s: %w: %w", id, err, errdefs.ErrUnavailable)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	st, err := taskv3.NewTTRPCTaskClient(client).State(ctx, &taskv3.StateRequest{ID: id})
	if err != nil {
		return TaskState{}, fmt.Errorf("shim state of %s: %w", id, err)
	}
	ts := TaskState{Exists: true, Pid: st.Pid, ExitCode: st.ExitStatus}
	switch st.Status {
	case tasktypes.Status_STOPPED:
		if st.ExitedAt != nil {
			ts.ExitedAt = st.ExitedAt.AsTime()
		}
	default:
		ts.Running = true
	}
	return ts, nil
}
