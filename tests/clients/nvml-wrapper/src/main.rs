// nvmlw-probe: what the nvml-wrapper crate reads from whatever
// libnvidia-ml.so it loads, one "key=value" line each, for the tests to
// compare with `gpuman status --json`.  A reading the library refuses
// prints its error (e.g. gpu0.fan=NotSupported).
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use std::fmt::Display;

fn show<T: Display, E: std::fmt::Debug>(key: String, r: Result<T, E>) {
    match r {
        Ok(v) => println!("{}={}", key, v),
        Err(e) => println!("{}={:?}", key, e),
    }
}

fn main() {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            println!("init={:?}", e);
            std::process::exit(1);
        }
    };
    show("driver_version".into(), nvml.sys_driver_version());
    let count = nvml.device_count().expect("device count");
    println!("count={}", count);
    for i in 0..count {
        let d = match nvml.device_by_index(i) {
            Ok(d) => d,
            Err(e) => {
                println!("gpu{}.handle={:?}", i, e);
                continue;
            }
        };
        let k = |s: &str| format!("gpu{}.{}", i, s);
        show(k("name"), d.name());
        show(k("uuid"), d.uuid());
        show(k("pci_bus_id"), d.pci_info().map(|p| p.bus_id));
        match d.memory_info() {
            Ok(m) => println!("{}={}/{}/{}", k("memory_mib"), m.total >> 20, m.used >> 20, m.free >> 20),
            Err(e) => println!("{}={:?}", k("memory_mib"), e),
        }
        show(k("util_gpu"), d.utilization_rates().map(|u| u.gpu));
        show(k("temperature_c"), d.temperature(TemperatureSensor::Gpu));
        show(k("power_mw"), d.power_usage());
        show(k("power_limit_mw"), d.enforced_power_limit());
        show(k("pcie_gen"), d.current_pcie_link_gen());
        show(k("pcie_max_width"), d.max_pcie_link_width());
        show(k("pcie_rx_kbps"), d.pcie_throughput(PcieUtilCounter::Receive));
        show(k("slowdown_c"), d.temperature_threshold(TemperatureThreshold::Slowdown));
        show(k("mem_clock_mhz"), d.clock_info(Clock::Memory));
        show(k("fan"), d.fan_speed(0));
        show(k("decoder"), d.decoder_utilization().map(|u| u.utilization));
        match d.running_compute_processes() {
            Ok(ps) => {
                let v: Vec<String> = ps
                    .iter()
                    .map(|p| match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => format!("{}:{}", p.pid, b >> 20),
                        UsedGpuMemory::Unavailable => format!("{}:NA", p.pid),
                    })
                    .collect();
                println!("{}={}", k("compute"), v.join(","));
            }
            Err(e) => println!("{}={:?}", k("compute"), e),
        }
    }
}
