package dockerworker

import "testing"

func TestPasswdWith(t *testing.T) {
	const img = "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"
	for _, tc := range []struct {
		name, passwd, imgUID string
		want                 string // "" is nil: no line to make
	}{
		{"the image user first, with the uid", img, "1000",
			"sandbox:x:1073741830:1000:sandbox:/home/sandbox:/bin/sh\n" + img},
		{"no final newline", "sandbox:x:1000:1000::/home/sandbox:/bin/sh", "1000",
			"sandbox:x:1073741830:1000::/home/sandbox:/bin/sh\nsandbox:x:1000:1000::/home/sandbox:/bin/sh\n"},
		{"no such user", img, "1001", ""},
		{"a short line is not an entry", "sandbox:x:1000:1000\n", "1000", ""},
		{"no passwd", "", "1000", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := passwdWith([]byte(tc.passwd), tc.imgUID, 1073741830, "1000")
			if (got == nil) != (tc.want == "") || string(got) != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOwnsUID(t *testing.T) {
	for _, tc := range []struct {
		name string
		disk DiskQuota
		ns   bool
		sh   shape
		user string
		want bool
	}{
		{"runc, tmpfs disk", DiskTmpfs, false, shape{runtime: "runc"}, "1000:1000", true},
		{"default runtime", DiskTmpfs, false, shape{}, "1000:1000", true},
		{"gvisor", DiskTmpfs, false, shape{runtime: RuntimeRunsc}, "1000:1000", false},
		{"root image", DiskTmpfs, false, shape{runtime: "runc"}, "", false},
		{"remapped daemon", DiskTmpfs, true, shape{runtime: "runc"}, "1000:1000", false},
		{"writable root under storage-opt", DiskStorageOpt, false, shape{runtime: "runc"}, "1000:1000", true},
		{"read-only root under storage-opt", DiskStorageOpt, false, shape{runtime: "runc", readOnly: true}, "1000:1000", true},
		{"writable root without a quota", DiskNone, false, shape{runtime: "runc"}, "1000:1000", true},
		{"read-only root without a quota", DiskNone, false, shape{runtime: "runc", readOnly: true}, "1000:1000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Backend{disk: tc.disk, userns: userNS{enabled: tc.ns}}
			if got := b.ownsUID(tc.sh, tc.user); got != tc.want {
				t.Errorf("ownsUID = %t, want %t", got, tc.want)
			}
		})
	}
}
