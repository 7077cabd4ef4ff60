//! A key as start-up replay holds it while it sorts a batch (the key of a `Del` or
//! `Expire` record): up to [`INLINE`] bytes inline, longer ones in their own
//! allocation. Most keys are short (`user:1000`, `key:000000012345`), so most records
//! need no allocation for their key.

use core::ops::Deref;

/// The longest key kept inline.
pub const INLINE: usize = 22;

/// A stored key: inline up to [`INLINE`] bytes, else boxed. 24 bytes either way.
#[derive(Clone)]
pub enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

const _: () = assert!(core::mem::size_of::<Key>() == 24);

impl Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..*len as usize],
            Key::Heap(b) => b,
        }
    }
}

impl AsRef<[u8]> for Key {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for Key {
    #[inline]
    fn from(k: &[u8]) -> Key {
        if k.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..k.len()].copy_from_slice(k);
            Key::Inline {
                len: k.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(k.into())
        }
    }
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_inline_long_ones_boxed_same_bytes() {
        for n in [0, 1, INLINE - 1, INLINE, INLINE + 1, 100] {
            let k: Vec<u8> = (0..n as u8).collect();
            let a = Key::from(k.as_slice());
            assert_eq!(&*a, k.as_slice());
            assert_eq!(matches!(a, Key::Inline { .. }), n <= INLINE, "{n}");
            assert_eq!(&*a.clone(), k.as_slice());
        }
    }
}
