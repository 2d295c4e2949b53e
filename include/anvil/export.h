#pragma once
// One export macro: libanvil is built with hidden visibility; only ANVIL_API symbols leave it.
#if defined(_WIN32)
#define ANVIL_API __declspec(dllexport)
#else
#define ANVIL_API __attribute__((visibility("default")))
#endif
