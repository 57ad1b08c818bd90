//go:build !unix

package devicesdk

import (
	"os"
	"path/filepath"
)

// lockQueue opens dir's meta file; where flock does not exist the queue is
// not locked against a second process (docs/sdk.md).
func lockQueue(dir string) (*os.File, error) {
	return os.Open(filepath.Join(dir, "meta"))
}
