//go:build !linux

package hostcgroup

import (
	"errors"
	"fmt"
)

var errUnsupported = fmt.Errorf("cgroups are Linux's: %w", errors.ErrUnsupported)

// EnterNamespaceOf is Linux's.
func EnterNamespaceOf(pid int) error { return errUnsupported }

// MountFullView is Linux's.
func MountFullView(ref int) error { return errUnsupported }

// Own is Linux's.
func Own(pid int) (string, error) { return "", errUnsupported }

// Move is Linux's.
func Move(root string, pid int, cgroupPath string) error { return errUnsupported }

// Remove is Linux's.
func Remove(root, cgroupPath string) {}

// Hierarchies is Linux's.
func Hierarchies(root string) []string { return nil }
