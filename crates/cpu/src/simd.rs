//! Runtime CPU-feature dispatch for hot loops: the body is compiled three times — baseline,
//! AVX2+FMA+F16C, and AVX-512 (F/BW/VL) — and the best copy the CPU supports is called.

#[inline]
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline]
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && has_avx2_fma()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[macro_export]
#[doc(hidden)]
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn inner($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast512($($arg: $ty),*) $(-> $ret)? { inner($($arg),*) }
                if $crate::simd::has_avx512() {
                    // SAFETY: the features were detected at run time.
                    return unsafe { fast512($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast($($arg: $ty),*) $(-> $ret)? { inner($($arg),*) }
                if $crate::simd::has_avx2_fma() {
                    // SAFETY: the features were detected at run time.
                    return unsafe { fast($($arg),*) };
                }
            }
            inner($($arg),*)
        }
    };
}
