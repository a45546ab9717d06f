// Command ocilabel runs crun on a bundle whose config.json it first labels
// with the OCI spec version 1.0.2, for the perf harness's `ctr run --rm`
// baseline on crun: containerd 2.x's ctr writes specs labelled 1.3.0, which
// crun 1.8 refuses ("unknown version specified"), and ctr has no option to
// label them otherwise. airlockd labels the specs of sessions it runs on
// crun the same way (runtime.specVersionOpt).
//
// The shim runs it as its runtime binary (`ctr run --runc-binary
// ocilabel`), with crun's command line; ocilabel finds crun beside itself
// (or at $OCILABEL_CRUN), rewrites the label of the --bundle's config.json
// when a create names one, and execs crun with the same arguments. Its own
// cost is one exec and, on create, one read and write of config.json.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const specVersion = "1.0.2"

func main() {
	crun := os.Getenv("OCILABEL_CRUN")
	if crun == "" {
		self, err := os.Executable()
		if err != nil {
			fail(err)
		}
		crun = filepath.Join(filepath.Dir(self), "crun")
	}
	if bundle := bundleArg(os.Args[1:]); bundle != "" {
		if err := label(filepath.Join(bundle, "config.json")); err != nil {
			fail(err)
		}
	}
	fail(syscall.Exec(crun, append([]string{crun}, os.Args[1:]...), os.Environ()))
}

// bundleArg is the value of --bundle or -b (as --bundle=DIR too).
func bundleArg(args []string) string {
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle=")
		}
	}
	return ""
}

// label sets ociVersion in the spec at path, every other field kept as
// it is.
func label(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	v, _ := json.Marshal(specVersion)
	if bytes.Equal(spec["ociVersion"], v) {
		return nil
	}
	spec["ociVersion"] = v
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ocilabel:", err)
	os.Exit(1)
}
