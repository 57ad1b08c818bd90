package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// disk is a NATS node's data on a file system of its own: ext4 in an
// image file on a loop device. What the node wrote but neither fsynced
// nor had written back and committed (ext4: data is written back after
// 30 s, the journal committed every 5 s) is in memory only, as on a machine:
// powerLoss keeps what had reached the image and drops the rest.
type disk struct {
	t      testing.TB
	img    string // the image file, as the device has it
	mnt    string // where it is mounted
	uid    int
	commit string // ProcCluster.DiskCommit
	opts   string // more mount options ("sync")
}

// newDisk makes a disk of 16 GiB (sparse: JetStream reserves room for
// every stream's limit, 1 GiB for most) in dir, mounted at mnt and
// given to uid; it is unmounted when the test ends.
func newDisk(t testing.TB, dir, mnt string, uid int, commit string) *disk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a disk of its own needs root (mount)")
	}
	d := &disk{t: t, img: filepath.Join(dir, "disk.img"), mnt: mnt, uid: uid, commit: commit}
	run(t, "truncate", "-s", "16G", d.img)
	// A small journal, neither it nor the inode tables written out first:
	// the image holds only what is used, and copies fast.
	run(t, "mkfs.ext4", "-q", "-F", "-J", "size=32", "-E", "lazy_itable_init=1,lazy_journal_init=1", d.img)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	d.mount()
	t.Cleanup(d.unmount)
	return d
}

func (d *disk) mount() {
	d.t.Helper()
	opts := "loop"
	if d.commit != "" {
		opts += ",commit=" + d.commit
	}
	if d.opts != "" {
		opts += "," + d.opts
	}
	run(d.t, "mount", "-o", opts, d.img, d.mnt)
	if err := os.Chown(d.mnt, d.uid, d.uid); err != nil {
		d.t.Fatal(err)
	}
}

func (d *disk) unmount() { _ = exec.Command("umount", d.mnt).Run() }

// powerLoss keeps what the device holds now and drops what the node's
// file system held in memory only: the image is copied as it is (the
// file system still mounted, its dirty pages not written), the file
// system is thrown away, and the copy is mounted in its place (ext4
// replays its journal, as after a crash). The node's process must be
// dead already.
func (d *disk) powerLoss() {
	d.t.Helper()
	kept := d.img + ".kept"
	held := dirBytes(d.mnt)
	run(d.t, "cp", "--sparse=always", d.img, kept)
	run(d.t, "umount", d.mnt) // writes the dropped pages to the old image, which goes
	if err := os.Rename(kept, d.img); err != nil {
		d.t.Fatal(err)
	}
	d.mount()
	d.t.Logf("power loss on %s: its files held %d bytes, %d are left", d.mnt, held, dirBytes(d.mnt))
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Disk is a disk of its own for a server this package does not start (a
// test's own ClickHouse): its files at Dir, on a file system mounted with
// ext4's defaults and opts ("sync": every write and directory change
// reaches the device before it returns).
type Disk struct {
	Dir string
	d   *disk
}

// NewDisk makes a Disk mounted at a fresh directory (root only: the test
// is skipped otherwise), unmounted when the test ends.
func NewDisk(t testing.TB, opts string) *Disk {
	t.Helper()
	mnt := t.TempDir()
	d := newDisk(t, t.TempDir(), mnt, 0, "")
	if opts != "" {
		d.unmount()
		d.opts = opts
		d.mount()
	}
	return &Disk{Dir: mnt, d: d}
}

// PowerLoss keeps what the device holds and drops what the file system
// held in memory only. Every process writing to it must be dead.
func (d *Disk) PowerLoss() { d.d.powerLoss() }

// PowerOff kills the nodes' processes at once and then drops what their
// disks held in memory only, as when machines lose power
// (ProcCluster.Disks). Start brings each back on what is left.
func PowerOff(nodes ...*NATSProc) {
	for _, p := range nodes {
		p.t.Helper()
		if p.disk == nil {
			p.t.Fatalf("nats node %s has no disk of its own to lose power on", p.name)
		}
		p.stopped = true
		_ = p.cmd.Process.Kill()
	}
	for _, p := range nodes {
		<-p.exited
		p.disk.powerLoss()
	}
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}
