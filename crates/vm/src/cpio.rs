//! The "newc" cpio format the kernel unpacks as an initramfs
//! (Documentation/driver-api/early-userspace/buffer-format.rst): a 110-byte
//! ASCII header of 13 hex fields, the NUL-terminated name, the data, each
//! padded to 4 bytes; a `TRAILER!!!` entry ends the archive.

/// An archive being written in memory.
#[derive(Debug)]
pub struct Cpio {
    out: Vec<u8>,
    next_ino: u32,
}

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Cpio {
    /// An empty archive.
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            next_ino: 1,
        }
    }

    fn pad(&mut self) {
        while self.out.len() & 3 != 0 {
            self.out.push(0);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        // Directories count "." and their entry; nothing here is hard-linked.
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let fields: [u32; 13] = [
            ino,
            mode,
            0, // uid root
            0, // gid root
            nlink,
            0, // mtime: fixed, so identical inputs give identical archives
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check (only for the "070702" variant)
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// A directory (mode 0755).
    pub fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, (0, 0), &[]);
    }

    /// A regular file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, S_IFREG | (perm & 0o7777), (0, 0), data);
    }

    /// A symbolic link `name` -> `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    /// A character device node.
    pub fn char_device(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | (perm & 0o7777), (major, minor), &[]);
    }

    /// Bytes written so far (without the trailer).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True before the first entry.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Ends the archive and returns it.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(header: &[u8], i: usize) -> u32 {
        let s = std::str::from_utf8(&header[6 + 8 * i..14 + 8 * i]).unwrap();
        u32::from_str_radix(s, 16).unwrap()
    }

    #[test]
    fn a_file_entry_has_the_newc_layout() {
        let mut c = Cpio::new();
        c.file("init", 0o755, b"#!/bin/sh\n");
        let out = c.finish();
        assert_eq!(&out[..6], b"070701");
        assert_eq!(field(&out, 1), 0o100755, "mode");
        assert_eq!(field(&out, 6), 10, "file size");
        assert_eq!(field(&out, 11), 5, "name size with its NUL");
        // Header (110) + "init\0" (5) = 115, padded to 116; then data.
        assert_eq!(&out[110..115], b"init\0");
        assert_eq!(&out[116..126], b"#!/bin/sh\n");
        // Data padded to 128, then the trailer.
        assert_eq!(&out[128..134], b"070701");
        assert_eq!(out.len() % 4, 0);
        let trailer = &out[128..];
        assert_eq!(&trailer[110..121], b"TRAILER!!!\0");
    }

    #[test]
    fn devices_links_and_dirs_carry_their_type() {
        let mut c = Cpio::new();
        c.dir("dev");
        c.char_device("dev/console", 0o600, 5, 1);
        c.symlink("sh", "busybox");
        let out = c.finish();
        // Entries: dir "dev" (110+4 -> 116), console.
        assert_eq!(field(&out, 1), 0o040755);
        let console = &out[116..];
        assert_eq!(field(console, 1), 0o020600);
        assert_eq!((field(console, 9), field(console, 10)), (5, 1));
        let link_at = out
            .windows(3)
            .position(|w| w == b"sh\0")
            .expect("symlink entry")
            - 110;
        let link = &out[link_at..];
        assert_eq!(field(link, 1), 0o120777);
        assert_eq!(field(link, 6), 7, "target length");
    }

    #[test]
    fn identical_inputs_give_identical_archives() {
        let build = || {
            let mut c = Cpio::new();
            c.dir("bin");
            c.file("bin/x", 0o644, b"abc");
            c.finish()
        };
        assert_eq!(build(), build());
    }
}
