//! Which probes a sweep runs on a device: the one place a new device plugs in.

use super::bandwidth::{BandwidthProbe, ProbeError, ProbeOptions};
use super::cpu_probe::{cpu_page_sizes, CpuProbe};
use super::gpu_probe::GpuProbe;
use crate::device::cpu::pages::{thp_available, thp_mode};
use crate::device::Device;

/// Probes for a device, first the one the table's main columns show, and notes about the choice.
pub type Probes = (Vec<Box<dyn BandwidthProbe>>, Vec<String>);

/// The probes for `device`, first the one the table's main columns show. The CPU gets two: with
/// transparent huge pages (when the kernel offers them) and with 4 KiB pages. A CUDA device gets
/// one, over its memory (HBM), running the paged gather and attention kernels. With
/// `opts.answer_only` the first alone: the answer reads no other.
pub fn probes_for(device: &Device, opts: &ProbeOptions) -> Result<Probes, ProbeError> {
    let (mut probes, mut notes) = device_probes(device, opts)?;
    if opts.answer_only && probes.len() > 1 {
        let left: Vec<String> = probes.split_off(1).iter().map(|p| p.memory()).collect();
        notes.push(format!(
            "--quick measures the {} probe alone (the one the answer reads): not the {} probe \
             (the sweep without --quick measures it)",
            probes[0].memory(),
            left.join(", ")
        ));
    }
    Ok((probes, notes))
}

fn device_probes(device: &Device, opts: &ProbeOptions) -> Result<Probes, ProbeError> {
    match device {
        Device::Cpu => {
            let mut notes = Vec::new();
            if !thp_available() {
                notes.push(format!(
                    "transparent huge pages unavailable (mode: {}): 4 KiB pages only",
                    thp_mode().unwrap_or_else(|| "unknown".into())
                ));
            }
            let pages = cpu_page_sizes(&ProbeOptions {
                answer_only: false,
                ..opts.clone()
            });
            // One limits' buffer for all of them (see `CpuProbe::beside`).
            let first = CpuProbe::new(pages[0], opts.clone())?;
            let others: Vec<CpuProbe> = pages[1..].iter().map(|&p| first.beside(p)).collect();
            let probes = std::iter::once(first)
                .chain(others)
                .map(|p| Box::new(p) as Box<dyn BandwidthProbe>)
                .collect();
            Ok((probes, notes))
        }
        Device::Cuda(dev) => Ok((
            vec![Box::new(GpuProbe::new(dev.clone(), opts.clone()))],
            Vec::new(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_only_keeps_the_first_probe_and_says_which_it_left_out() {
        let mut opts = ProbeOptions {
            pool_bytes: 1 << 20,
            reps: 1,
            rounds: 1,
            seq_tokens: 256,
            seed: 1,
            attention: None,
            answer_only: false,
        };
        // Nothing is mapped or measured until a probe is asked for a figure.
        let (all, _) = probes_for(&Device::Cpu, &opts).unwrap();
        let labels: Vec<String> = all.iter().map(|p| p.memory()).collect();
        opts.answer_only = true;
        let (first, notes) = probes_for(&Device::Cpu, &opts).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].memory(), labels[0]);
        let said = notes.iter().any(|n| n.contains("--quick measures the"));
        assert_eq!(said, labels.len() > 1, "{notes:?}");
        for left in &labels[1..] {
            assert!(notes
                .iter()
                .any(|n| n.contains(&format!("not the {left} probe"))));
        }
    }
}
