package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
)

// overAPI is err as a client of containerd's API receives it: the shim's
// error wrapped by containerd, encoded into a gRPC status and decoded.
func overAPI(err error) error {
	return errgrpc.ToNative(errgrpc.ToGRPC(fmt.Errorf("failed to create shim task: %w", errgrpc.ToNative(err))))
}

func TestShimGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"in process", fmt.Errorf("create: %w", ttrpc.ErrClosed), true},
		{"through the API", overAPI(ttrpc.ErrClosed), true},
		{"another failure through the API", overAPI(errors.New("connection refused")), false},
		{"ttrpc's text in another class", fmt.Errorf("container: ttrpc: closed: %w", errdefs.ErrNotFound), false},
		{"ttrpc's text mid-message", overAPI(errors.New("ttrpc: closed while reading the spec")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shimGone(tc.err); got != tc.want {
				t.Errorf("shimGone(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestClassifyStartError(t *testing.T) {
	const runcMissing = `OCI runtime exec failed: exec failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown`
	for _, tc := range []struct {
		name    string
		err     error
		invalid bool
	}{
		{"missing program", overAPI(errors.New(runcMissing)), true},
		{"not executable", overAPI(errors.New(`OCI runtime exec failed: exec failed: unable to start container process: exec: "/etc/passwd": permission denied: unknown`)), true},
		{"directory", overAPI(errors.New(`OCI runtime start failed: exec: "/tmp": not a directory: unknown`)), true},
		{"a directory, runc", overAPI(errors.New(`OCI runtime exec failed: exec failed: unable to start container process: exec: "/tmp": is a directory`)), true},
		{"other runc failure", overAPI(errors.New("OCI runtime exec failed: cgroup is frozen: unknown")), false},
		// crun 1.8's words for the same failures.
		{"missing program, crun", overAPI(errors.New("OCI runtime exec failed: executable file `nope` not found in $PATH: No such file or directory")), true},
		{"missing path, crun", overAPI(errors.New("OCI runtime exec failed: executable file `/nonexist/x` not found in $PATH: No such file or directory")), true},
		{"not executable, crun", overAPI(errors.New("OCI runtime exec failed: open executable: Permission denied")), true},
		{"a directory, crun", overAPI(errors.New("OCI runtime exec failed: open executable: Operation not permitted")), true},
		{"under a file, crun", overAPI(errors.New("OCI runtime exec failed: open executable: Not a directory")), true},
		{"other crun failure", overAPI(errors.New("OCI runtime exec failed: cannot open cgroup: No such file or directory")), false},
		{"a program named like a reason, crun", overAPI(errors.New("OCI runtime create failed: mount `/proc` to `proc`: Permission denied")), false},
		{"another class", fmt.Errorf("%s: %w", runcMissing, errdefs.ErrPermissionDenied), false},
		{"cancelled", fmt.Errorf("%s: %w", runcMissing, context.Canceled), false},
		{"shim gone", overAPI(ttrpc.ErrClosed), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classifyStartError(tc.err)
			if errdefs.IsInvalidArgument(got) != tc.invalid {
				t.Errorf("classifyStartError(%v) = %v; invalid argument %v, want %v", tc.err, got, errdefs.IsInvalidArgument(got), tc.invalid)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("classifyStartError(%v) = %v, which does not wrap the error", tc.err, got)
			}
		})
	}
}
