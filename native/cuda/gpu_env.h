// Per-environment state of the GPU half of the addon (constructors, the event
// poller), kept apart from core's AddonData so the two halves stay independent.
#pragma once

#include <napi.h>

#include "../core/op.h"

namespace ncclnode {

class Poller;

struct GpuEnv {
  Napi::FunctionReference deviceBufferCtor, streamCtor, eventCtor, ncclControlCtor;
  Poller* poller = nullptr;
};

GpuEnv& gpuEnv(Napi::Env env);

// Registers every GPU export (DeviceBuffer, Stream, Event, createNccl, health, ...).
void registerGpu(Napi::Env env, Napi::Object exports);

// True (and *out filled, mem = Device) for a NativeDeviceBuffer; registerGpu hands it
// to core as its DeviceMemoryRecognizer (core/buffers.h).
bool deviceBufferView(const Napi::Value& value, BufferView* out);

// Type tags that let native code recognise its own wrapped objects.
extern const napi_type_tag kDeviceBufferTag;
extern const napi_type_tag kStreamTag;
bool hasTag(Napi::Env env, const Napi::Value& v, const napi_type_tag& tag);

}  // namespace ncclnode
