"""Run: the image, one attempt in one container (the engine, the only holder of a docker client), its
build log and live view, the result store, and what runs leave behind (doctor, gc decisions). May
import plan/, recipes/ and spec."""
