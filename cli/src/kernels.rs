//! `coll kernels`: compiles the GPU kernel's units for given architectures and element
//! types into the kernel cache ahead of time, with NVRTC and no GPU, so that a container
//! image or a cluster's shared directory prepared once spares every fresh process of every
//! job the compile of its first load (loads read the cache before compiling). Building coll
//! with `COLL_EMBED_KERNELS` set to such a directory carries its images in the binary
//! (`coll_executor::cuda::device::builtin_images`), which loads then take before any cache.

use crate::EXIT_USAGE;
use crate::args::parse_dtype;
use crate::output::Ctx;
use clap::Args;
use coll_executor::cuda::KERNEL_SOURCE;
use coll_executor::cuda::device::prebuild;
use coll_executor::dtype::DType;
use std::path::PathBuf;
use std::time::Instant;

/// The arguments of `coll kernels`.
#[derive(Debug, Args)]
pub struct KernelsArgs {
    /// GPU architectures to compile for, as NVRTC names them: `sm_90` (H100, H200),
    /// `sm_100` (B200); several separated by commas.
    #[arg(long, required = true, value_delimiter = ',', value_name = "ARCH")]
    arch: Vec<String>,
    /// Element types (default: all of them), separated by commas.
    #[arg(long, value_delimiter = ',', value_parser = parse_dtype, value_name = "DTYPE")]
    dtype: Vec<DType>,
    /// Where to put the compiled units (default: the kernel cache loads read,
    /// `COLL_CACHE_DIR`'s rule).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

impl Ctx<'_> {
    /// Runs `coll kernels`; returns the exit code.
    pub fn kernels(&mut self, args: &KernelsArgs) -> u8 {
        let dir = match &args.cache_dir {
            Some(d) => d.clone(),
            None => match self.gpu_settings(1.0) {
                Ok(s) => match s.cache_dir {
                    Some(d) => d,
                    None => {
                        let _ = writeln!(
                            self.err,
                            "error: COLL_CACHE_DIR is empty (no kernel cache); give --cache-dir"
                        );
                        return EXIT_USAGE;
                    }
                },
                Err(code) => return code,
            },
        };
        let dtypes = if args.dtype.is_empty() {
            DType::ALL.to_vec()
        } else {
            args.dtype.clone()
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        for arch in &args.arch {
            let start = Instant::now();
            let (units, images) = match prebuild(KERNEL_SOURCE, arch, &dtypes, &dir, threads) {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(self.err, "error: {arch}: {e}");
                    return crate::EXIT_FAILURE;
                }
            };
            let compiled = images.units.iter().filter(|u| !u.from_cache).count();
            let image = images
                .units
                .first()
                .map_or_else(String::new, |u| u.image.describe());
            let slowest = units
                .iter()
                .zip(&images.units)
                .filter(|(_, i)| !i.from_cache)
                .max_by_key(|(_, i)| i.compile)
                .map_or_else(String::new, |(u, i)| {
                    format!(", slowest {} {:.2} s", u.name(), i.compile.as_secs_f64())
                });
            let _ = writeln!(
                self.out,
                "{arch}: {} units of {} ({image}): {compiled} compiled on {} threads, {} \
                 already there, in {:.2} s{slowest}; in {}",
                units.len(),
                dtypes
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(","),
                images.threads,
                units.len() - compiled,
                start.elapsed().as_secs_f64(),
                dir.display()
            );
        }
        crate::EXIT_OK
    }
}
