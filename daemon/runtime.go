package daemon

import (
	"context"
	"net"
	"syscall"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/airlock-sandbox/airlock/runtime"
)

// sandboxRuntime is what the session manager needs of the container
// runtime: *runtime.Runtime on containerd, or a fake in the lifecycle's
// tests without root.
type sandboxRuntime interface {
	PrepareRootfs(ctx context.Context, id, image string) (*runtime.Rootfs, error)
	Create(ctx context.Context, o runtime.CreateOptions) error
	Start(ctx context.Context, id, logDir string, logSize int64, tty bool) (uint32, <-chan containerd.ExitStatus, error)
	AttachTTY(ctx context.Context, id, logDir string) (*net.UnixConn, error)
	Resize(ctx context.Context, id string, cols, rows uint32) error
	Task(ctx context.Context, id string) (runtime.TaskState, error)
	// ShimState asks the task's shim, bypassing containerd.
	ShimState(ctx context.Context, id string) (runtime.TaskState, error)
	Wait(ctx context.Context, id string) (<-chan containerd.ExitStatus, error)
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error)
	ProcessEnv(ctx context.Context, id string) ([]string, error)
	DeleteTask(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Owned(ctx context.Context) (map[string]bool, error)
	Resources(ctx context.Context, id string) ([]string, error)
	StartAnchor(ctx context.Context, o runtime.AnchorOptions) <-chan struct{}
	StopAnchor(ctx context.Context) error
	Close() error
}

var _ sandboxRuntime = (*runtime.Runtime)(nil)
