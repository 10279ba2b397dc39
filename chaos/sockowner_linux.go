package chaos

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// socketOwner finds which of pids owns the TCP socket with local address local and
// remote address remote (the dialing end of a loopback connection), by matching
// /proc/net/tcp's socket inode against each process's open files. It needs no
// privileges for processes of the same user. found is false when no such socket
// exists (any more).
//
// The dialer may close its socket while the files are scanned (a node's dial that
// timed out, a process killed): the inode is then in /proc/net/tcp but in no file
// table. So a miss looks the socket up again, and reports it gone when it has no file
// any more (an orphaned socket's inode reads 0) rather than owned by nobody of pids.
// On a node with a thousand attack connections open the scan is long enough for
// this to happen (chaos/attack_bytes.go). A socket still there is scanned again after
// a pause (close(2) takes the descriptor out of the table a moment before the socket
// is orphaned); only one that outlived ownerScans scans unowned is found and not ok.
func socketOwner(local, remote *net.TCPAddr, pids []int) (pid int, found, ok bool) {
	inode, found := socketInode(local, remote)
	if !found {
		return 0, false, false
	}
	for i := range ownerScans {
		if i > 0 {
			time.Sleep(time.Duration(i) * 20 * time.Millisecond)
		}
		if afterSocketLookup != nil {
			afterSocketLookup()
		}
		if pid, ok := inodeOwner(inode, pids); ok {
			return pid, true, true
		}
		if again, still := socketInode(local, remote); !still || again != inode {
			return 0, false, false
		}
	}
	return 0, true, false
}

// ownerScans is how many scans a socket must outlive unowned to be unidentified.
const ownerScans = 3

// inodeOwner is the first of pids with socket inode among its open files.
func inodeOwner(inode uint64, pids []int) (int, bool) {
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return pid, true
			}
		}
	}
	return 0, false
}

// afterSocketLookup, when set (tests), runs between finding a socket's inode and
// each scan of the processes' files for it.
var afterSocketLookup func()

// socketInode looks the socket up in /proc/net/tcp (IPv4 only: the harness uses
// 127.0.0.0/8).
func socketInode(local, remote *net.TCPAddr) (uint64, bool) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	l, r := procAddr(local), procAddr(remote)
	if l == "" || r == "" {
		return 0, false
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || fs[1] != l || fs[2] != r {
			continue
		}
		inode, err := strconv.ParseUint(fs[9], 10, 64)
		return inode, err == nil && inode != 0
	}
	return 0, false
}

// procAddr formats an IPv4 address as /proc/net/tcp does: the network-order address
// read as a native 32-bit word in hex, then the port in hex ("0100007F:1F90" on x86).
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip), a.Port)
}
