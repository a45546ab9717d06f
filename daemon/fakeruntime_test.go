package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/runtime"
)

// fakeRuntime is a sandboxRuntime without containers: each sandbox's
// "init" is a goroutine that speaks airlock-init's side of the launch
// protocol over the real FIFOs of the session's launch directory, then
// runs until the test ends it or a signal does. It lets the lifecycle
// (create, claim, start, stop, exit, reconcile, pools) run without root.
// It outlives a Daemon, as containerd does, so a test can restart one.
type fakeRuntime struct {
	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	// ignoreTERM makes processes survive SIGTERM (only SIGKILL ends them).
	ignoreTERM bool
	// failCreate makes Create fail for every sandbox.
	failCreate error
	// entered, if set, is told of each Create; gate, if set, holds each
	// until it receives.
	entered chan string
	gate    chan struct{}
}

type fakeSandbox struct {
	id      string
	spec    *oci.Spec
	task    bool // a task exists (until DeleteTask)
	running bool
	code    uint32
	at      time.Time
	// waiters get the exit status; a restarted daemon's Wait adds one.
	waiters []chan containerd.ExitStatus
	// launched receives the launch message the init read.
	launched chan launch.Message
	execs    []runtime.ExecOptions
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{sandboxes: map[string]*fakeSandbox{}}
}

func (f *fakeRuntime) get(id string) (*fakeSandbox, error) {
	sb := f.sandboxes[id]
	if sb == nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

func (f *fakeRuntime) PrepareRootfs(_ context.Context, id, _ string) (*runtime.Rootfs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandboxes[id] == nil {
		f.sandboxes[id] = &fakeSandbox{id: id, launched: make(chan launch.Message, 1)}
	}
	return &runtime.Rootfs{}, nil
}

func (f *fakeRuntime) Create(ctx context.Context, o runtime.CreateOptions) error {
	spec := &oci.Spec{
		Process: &specs.Process{Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"},
		Root:    &specs.Root{Path: "rootfs"},
		Linux:   &specs.Linux{},
	}
	for _, opt := range o.SpecOpts {
		if err := opt(ctx, nil, &containers.Container{ID: o.ID}, spec); err != nil {
			return err
		}
	}
	if f.entered != nil {
		f.entered <- o.ID
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failCreate != nil {
		return f.failCreate
	}
	sb, err := f.get(o.ID)
	if err != nil {
		return err
	}
	sb.spec = spec
	return nil
}

func (f *fakeRuntime) AttachTTY(context.Context, string, string) (*net.UnixConn, error) {
	return nil, fmt.Errorf("fake runtime: no terminals: %w", errdefs.ErrFailedPrecondition)
}

func (f *fakeRuntime) Resize(context.Context, string, uint32, uint32) error {
	return fmt.Errorf("fake runtime: no terminals: %w", errdefs.ErrFailedPrecondition)
}

func (f *fakeRuntime) Start(_ context.Context, id, _ string, _ int64, _ bool) (uint32, <-chan containerd.ExitStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return 0, nil, err
	}
	dir := ""
	for _, m := range sb.spec.Mounts {
		if m.Destination == launch.SandboxDir {
			dir = m.Source
		}
	}
	if dir == "" {
		return 0, nil, fmt.Errorf("sandbox %q has no launch directory", id)
	}
	// ack first, then ctl, as airlock-init: the daemon's Ready then
	// finds a reader.
	ack, err := os.OpenFile(launch.AckPath(dir), os.O_RDWR, 0)
	if err != nil {
		return 0, nil, err
	}
	ctl, err := os.OpenFile(launch.CtlPath(dir), os.O_RDWR, 0)
	if err != nil {
		ack.Close()
		return 0, nil, err
	}
	sb.task, sb.running = true, true
	ch := make(chan containerd.ExitStatus, 1)
	sb.waiters = append(sb.waiters, ch)
	go func() {
		defer ack.Close()
		line, err := bufio.NewReader(io.LimitReader(ctl, launch.MaxMessage+1)).ReadBytes('\n')
		ctl.Close()
		var m launch.Message
		if err == nil && json.Unmarshal(line, &m) == nil {
			sb.launched <- m
		}
	}()
	// pid 0: KillInit refuses it, so every kill goes through Signal.
	return 0, ch, nil
}

// exit ends sandbox id's process with code, as its command exiting would.
func (f *fakeRuntime) exit(id string, code uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exitLocked(f.sandboxes[id], code)
}

func (f *fakeRuntime) exitLocked(sb *fakeSandbox, code uint32) {
	if sb == nil || !sb.running {
		return
	}
	sb.running, sb.code, sb.at = false, code, time.Now().UTC()
	for _, w := range sb.waiters {
		w <- *containerd.NewExitStatus(code, sb.at, nil)
	}
	sb.waiters = nil
}

func (f *fakeRuntime) ShimState(ctx context.Context, id string) (runtime.TaskState, error) {
	return f.Task(ctx, id)
}

func (f *fakeRuntime) Task(_ context.Context, id string) (runtime.TaskState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return runtime.TaskState{}, err
	}
	if !sb.task {
		return runtime.TaskState{}, nil
	}
	return runtime.TaskState{Exists: true, Running: sb.running, ExitCode: sb.code, ExitedAt: sb.at}, nil
}

func (f *fakeRuntime) Wait(_ context.Context, id string) (<-chan containerd.ExitStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return nil, err
	}
	ch := make(chan containerd.ExitStatus, 1)
	if !sb.running {
		ch <- *containerd.NewExitStatus(sb.code, sb.at, nil)
		return ch, nil
	}
	sb.waiters = append(sb.waiters, ch)
	return ch, nil
}

func (f *fakeRuntime) Signal(_ context.Context, id string, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	if sig == syscall.SIGTERM && f.ignoreTERM {
		return nil
	}
	f.exitLocked(sb, 128+uint32(sig))
	return nil
}

func (f *fakeRuntime) Exec(_ context.Context, id string, o runtime.ExecOptions) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return -1, err
	}
	sb.execs = append(sb.execs, o)
	return 0, nil
}

func (f *fakeRuntime) ProcessEnv(_ context.Context, id string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return nil, err
	}
	return sb.spec.Process.Env, nil
}

func (f *fakeRuntime) DeleteTask(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		f.exitLocked(sb, 137)
		sb.task = false
	}
	return nil
}

func (f *fakeRuntime) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		f.exitLocked(sb, 137)
	}
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeRuntime) Owned(context.Context) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for id := range f.sandboxes {
		out[id] = true
	}
	return out, nil
}

// ids lists the sandboxes the fake holds.
func (f *fakeRuntime) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.sandboxes {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (f *fakeRuntime) Resources(_ context.Context, id string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(id); err != nil {
		return nil, err
	}
	return []string{"container/" + id}, nil
}

func (f *fakeRuntime) StartAnchor(context.Context, runtime.AnchorOptions) <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

func (f *fakeRuntime) StopAnchor(context.Context) error { return nil }

func (f *fakeRuntime) Close() error { return nil }

// launched waits for the launch message sandbox id's init read.
func (f *fakeRuntime) launched(id string, wait time.Duration) (launch.Message, bool) {
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil {
		return launch.Message{}, false
	}
	select {
	case m := <-sb.launched:
		return m, true
	case <-time.After(wait):
		return launch.Message{}, false
	}
}
