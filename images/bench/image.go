// Package benchimage builds airlock/bench:bookworm, the image of `airlock
// bench`'s sessions: the agent image plus one layer with the benchmark's
// multi-call client (squeue, scontrol, scancel, kubectl, aws,
// git-credential-airlock, gh, modelctl, pkgctl and pastebin) and a system
// git configuration that uses the credential helper.
//
// The image is made by appending a layer to the agent image's OCI archive
// with internal/ocipack's Append: the agent's blobs are copied unchanged,
// and a new layer, configuration, manifest and index are written after
// them. Nothing is unpacked. This package owns only what the layer holds.
package benchimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// Ref is the image's name.
const Ref = "airlock/bench:bookworm"

// CLIPath is where the client binary is installed in the image.
const CLIPath = "/usr/local/bin/airlock-bench-cli"

// Links are the command names installed as symlinks to the client, beside
// it: every command of package clients (git-credential under the name git
// looks for). None is a name the agent image has already: the client's
// paste site command is pastebin, since coreutils has a paste.
var Links = []string{"squeue", "scontrol", "scancel", "kubectl", "aws", "git-credential-airlock", "gh", "modelctl", "pkgctl", "pastebin"}

// Env is added to the image's environment: git fails instead of prompting
// when the helper has no credential for a host.
var Env = []string{"GIT_TERMINAL_PROMPT=0"}

// GitConfig is the image's /etc/gitconfig.
//
//go:embed gitconfig
var GitConfig []byte

// builderVersion changes whenever the layer's content rules change, so that
// cached archives of older rules are not reused.
const builderVersion = "airlock-bench-image/1"

// epoch is the time stamp of the layer's files and of the image (the agent
// recipe's SOURCE_DATE_EPOCH), so that equal inputs give equal archives.
var epoch = time.Unix(1767225600, 0).UTC()

// Layer returns the bench layer, an uncompressed tar stream, holding the
// client binary cli.
func Layer(cli []byte) ([]byte, error) {
	if len(cli) == 0 {
		return nil, fmt.Errorf("bench layer: empty client binary: %w", errdefs.ErrInvalidArgument)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uname, h.Gname = epoch, "root", "root"
		h.Format = tar.FormatPAX
		return tw.WriteHeader(h)
	}
	for _, d := range []string{"etc/", "usr/", "usr/local/", "usr/local/bin/"} {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/gitconfig", Mode: 0o644, Size: int64(len(GitConfig))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(GitConfig); err != nil {
		return nil, err
	}
	bin := strings.TrimPrefix(CLIPath, "/")
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: bin, Mode: 0o755, Size: int64(len(cli))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(cli); err != nil {
		return nil, err
	}
	for _, l := range Links {
		if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: path.Join(path.Dir(bin), l), Linkname: path.Base(bin), Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Build returns the path of the bench image archive made from the agent
// image archive and the client binary, building it into cacheDir unless an
// archive of the same inputs is there already. Inputs are identified by the
// agent archive's path, size and modification time and by the client's
// content.
func Build(agentArchive, cliBinary, cacheDir string) (string, error) {
	return BuildOn(agentArchive, cliBinary, cacheDir, Ref)
}

// AgentRef is the name of the bench image built on the image of agent
// (airlock/bench-claude-code:bookworm), which `airlock bench --agent` runs
// its sessions in: the agent's binary beside the bench's clients.
func AgentRef(agent string) string { return "airlock/bench-" + agent + ":bookworm" }

// BuildOn is Build on any image archive built from the agent image (an
// agent's image, such as airlock/claude-code:bookworm), naming the result
// ref.
func BuildOn(baseArchive, cliBinary, cacheDir, ref string) (string, error) {
	agentArchive := baseArchive
	cli, err := os.ReadFile(cliBinary)
	if err != nil {
		return "", fmt.Errorf("bench image: client binary: %w", err)
	}
	abs, err := filepath.Abs(agentArchive)
	if err != nil {
		return "", err
	}
	base, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("bench image: agent image archive: %w", err)
	}
	defer base.Close()
	fi, err := base.Stat()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%d\n%d\n", builderVersion, abs, fi.Size(), fi.ModTime().UnixNano())
	h.Write(GitConfig)
	cliSum := sha256.Sum256(cli)
	h.Write(cliSum[:])
	fmt.Fprintf(h, "%q %q %q\n", Links, Env, ref)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	out := filepath.Join(cacheDir, "airlock-bench-"+key+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	layer, err := Layer(cli)
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(cacheDir, ".airlock-bench-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = ocipack.Append(tmp, base, bytes.NewReader(layer), ocipack.AppendConfig{
		Ref:       ref,
		Env:       Env,
		Labels:    map[string]string{"dev.airlock.image.bench": key},
		CreatedBy: "airlock bench: airlock-bench-cli and /etc/gitconfig",
		Created:   epoch,
		TempDir:   cacheDir,
	})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("bench image: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}
