//! Just enough ELF to tell whether a program runs in the initramfs: a
//! 64-bit x86-64 executable with no program interpreter (PT_INTERP), i.e.
//! statically linked. The guest has no dynamic loader and no libc.

/// What an ELF file says about how it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    /// No interpreter: runs as is.
    Static,
    /// Needs a dynamic loader (the path in PT_INTERP).
    Dynamic,
}

const PT_INTERP: u32 = 3;
const EM_X86_64: u16 = 62;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The linkage of an x86-64 ELF executable, or why it is not one.
pub fn linkage(bytes: &[u8]) -> Result<Linkage, String> {
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little endian.
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = u16_at(bytes, 0x12).ok_or("truncated ELF header")?;
    if machine != EM_X86_64 {
        return Err(format!("built for ELF machine {machine}, not x86-64"));
    }
    let phoff = u64_at(bytes, 0x20).ok_or("truncated ELF header")? as usize;
    let phentsize = u16_at(bytes, 0x36).ok_or("truncated ELF header")? as usize;
    let phnum = u16_at(bytes, 0x38).ok_or("truncated ELF header")? as usize;
    for i in 0..phnum {
        let kind = u32_at(bytes, phoff + i * phentsize).ok_or("truncated program headers")?;
        if kind == PT_INTERP {
            return Ok(Linkage::Dynamic);
        }
    }
    Ok(Linkage::Static)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 header plus `kinds` program headers.
    fn elf(machine: u16, kinds: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x12..0x14].copy_from_slice(&machine.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&(kinds.len() as u16).to_le_bytes());
        for k in kinds {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&k.to_le_bytes());
            b.extend(ph);
        }
        b
    }

    #[test]
    fn interpreter_means_dynamic() {
        assert_eq!(linkage(&elf(62, &[6, 3, 1])), Ok(Linkage::Dynamic));
        assert_eq!(linkage(&elf(62, &[1, 1, 2])), Ok(Linkage::Static));
    }

    #[test]
    fn other_files_are_refused() {
        assert!(linkage(b"#!/bin/sh\n").is_err());
        assert!(linkage(&elf(183, &[1])).unwrap_err().contains("not x86-64"));
        let mut cut = elf(62, &[1, 1]);
        cut.truncate(80);
        assert!(linkage(&cut).is_err());
    }

    #[test]
    fn this_test_binary_is_recognised() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(linkage(&me).is_ok());
    }
}
