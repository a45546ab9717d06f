// Command ocipack packs a root filesystem tar into a single-layer OCI image
// layout archive:
//
//	ocipack -ref airlock/agent:bookworm -env PATH=/usr/bin:/bin -o image.tar rootfs.tar
//
// or, with -base, adds the tar as a layer on top of the image in an OCI
// archive (the base's blobs copied unchanged, its user, working directory
// and command kept; -env and -label merged into its configuration):
//
//	ocipack -base agent.tar -ref airlock/codex:bookworm -label K=V -o codex.tar layer.tar
//
// The tar is read from the named file, or from stdin when it is "-"; a
// layer is held to the same rules as a root filesystem (internal/ocipack's
// FilterLayer). The image's creation time comes from -created (Unix
// seconds), else from $SOURCE_DATE_EPOCH; it also clamps file modification
// times.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ocipack: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var (
		cfg        ocipack.Config
		out        string
		created    = os.Getenv("SOURCE_DATE_EPOCH")
		cmd        string
		entrypoint string
		base       string
	)
	fs := flag.NewFlagSet("ocipack", flag.ContinueOnError)
	fs.StringVar(&out, "o", "", "output archive `path` (required)")
	fs.StringVar(&base, "base", "", "OCI image archive `path` to add the tar to as a layer")
	fs.StringVar(&cfg.Ref, "ref", "", "image `reference` recorded in index.json")
	fs.StringVar(&cfg.User, "user", "", "default `user[:group]`")
	fs.StringVar(&cfg.WorkingDir, "workdir", "", "default working `dir`ectory")
	fs.StringVar(&cmd, "cmd", "", "default command as a JSON `array`")
	fs.StringVar(&entrypoint, "entrypoint", "", "entrypoint as a JSON `array`")
	fs.StringVar(&cfg.CreatedBy, "created-by", "", "`text` for the image history")
	fs.StringVar(&created, "created", created, "creation time in Unix `seconds` (default $SOURCE_DATE_EPOCH)")
	fs.StringVar(&cfg.TempDir, "tmpdir", "", "`dir`ectory for the layer while it is written")
	fs.Func("env", "default environment `KEY=VALUE` (repeatable)", func(s string) error {
		if !strings.Contains(s, "=") {
			return errors.New("want KEY=VALUE")
		}
		cfg.Env = append(cfg.Env, s)
		return nil
	})
	fs.Func("label", "image label `KEY=VALUE` (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return errors.New("want KEY=VALUE")
		}
		if cfg.Labels == nil {
			cfg.Labels = map[string]string{}
		}
		cfg.Labels[k] = v
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if out == "" || fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want -o OUT and one ROOTFS.tar argument")
	}
	if created != "" {
		sec, err := strconv.ParseInt(created, 10, 64)
		if err != nil {
			return fmt.Errorf("creation time %q: want Unix seconds", created)
		}
		cfg.Created = time.Unix(sec, 0).UTC()
	}
	for _, a := range []struct {
		flag string
		src  string
		dst  *[]string
	}{{"-cmd", cmd, &cfg.Cmd}, {"-entrypoint", entrypoint, &cfg.Entrypoint}} {
		if a.src == "" {
			continue
		}
		if err := json.Unmarshal([]byte(a.src), a.dst); err != nil {
			return fmt.Errorf("%s %q: want a JSON array of strings: %w", a.flag, a.src, err)
		}
	}

	if base != "" && (cfg.User != "" || cfg.WorkingDir != "" || cmd != "" || entrypoint != "") {
		return errors.New("-base keeps the base image's -user, -workdir, -cmd and -entrypoint; drop them")
	}

	var in io.Reader = os.Stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var desc ocispec.Descriptor
	if base != "" {
		desc, err = appendLayer(bw, base, bufio.NewReaderSize(in, 1<<20), cfg)
	} else {
		desc, err = ocipack.Pack(bw, bufio.NewReaderSize(in, 1<<20), cfg)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return err
	}
	fmt.Fprintf(os.Stderr, "ocipack: wrote %s (manifest %s)\n", out, desc.Digest)
	return nil
}

// appendLayer writes to w the image of the archive at base with the tar in
// as one more layer, filtered as Pack filters a root filesystem.
func appendLayer(w io.Writer, base string, in io.Reader, cfg ocipack.Config) (ocispec.Descriptor, error) {
	bf, err := os.Open(base)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer bf.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(ocipack.FilterLayer(pw, in, cfg.Created)) }()
	desc, err := ocipack.Append(w, bf, pr, ocipack.AppendConfig{
		Ref:       cfg.Ref,
		Env:       cfg.Env,
		Labels:    cfg.Labels,
		CreatedBy: cfg.CreatedBy,
		Created:   cfg.Created,
		TempDir:   cfg.TempDir,
	})
	// Unblock the filter if Append stopped before reading the whole layer.
	pr.CloseWithError(errors.New("layer not read to the end"))
	return desc, err
}
